//! Test certificates, made in the test: a private certificate authority and leaf certificates it
//! signs for `localhost` and 127.0.0.1, written as PEM files. Nothing is trusted but what a test
//! trusts on purpose (a client's or idem's `ca_file`).

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// The CA's certificate (PEM), to trust.
    pub pem: String,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
        let pem = issuer.pem();
        Self { issuer, pem }
    }

    /// Writes the CA certificate to `dir/name`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.pem).expect("write CA");
        path
    }

    /// A leaf certificate for localhost and 127.0.0.1 whose subject is `name`: (cert PEM, key PEM).
    pub fn leaf(&self, name: &str) -> (String, String) {
        let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        (cert.pem(), key.serialize_pem())
    }

    /// Writes a leaf certificate and its key to `dir/cert.pem` and `dir/key.pem` (replacing what
    /// is there, each file in one rename, as a renewal tool would); answers the certificate's DER.
    pub fn write_leaf(&self, dir: &Path, name: &str) -> Vec<u8> {
        let (cert, key) = self.leaf(name);
        for (file, text) in [("key.pem", &key), ("cert.pem", &cert)] {
            let tmp = dir.join(format!("{file}.tmp"));
            std::fs::write(&tmp, text).expect("write");
            std::fs::rename(&tmp, dir.join(file)).expect("rename");
        }
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(cert.as_bytes()).expect("pem").to_vec()
    }
}
