//! A PostgreSQL schema of a test's own on the database IDEM_TEST_DATABASE_URL names, dropped when
//! the guard goes. Without the variable, `create` says loudly that the test is skipped.

pub struct TestSchema {
    /// A URL whose connections use the schema (`options=-c search_path=…`).
    pub url: String,
    base: String,
    name: String,
}

impl TestSchema {
    pub async fn create(test: &str) -> Option<Self> {
        let Ok(base) = std::env::var("IDEM_TEST_DATABASE_URL") else {
            use std::io::Write;
            let _ =
                writeln!(std::io::stderr(), "!!! SKIPPED: IDEM_TEST_DATABASE_URL is not set: {test} did not run !!!");
            return None;
        };
        // Unique per test even when two tests share a tag: each gets a schema of its own.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("idem_{test}_{}_{n}", std::process::id());
        let (admin, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(connection);
        admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"))
            .await
            .expect("schema");
        let sep = if base.contains('?') { '&' } else { '?' };
        Some(Self { url: format!("{base}{sep}options=-c%20search_path%3D{name}"), base, name })
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                if let Ok((client, connection)) = tokio_postgres::connect(&base, tokio_postgres::NoTls).await {
                    tokio::spawn(connection);
                    let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE")).await;
                }
            });
        })
        .join();
    }
}
