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
            idem_conformance::skipped(&format!("IDEM_TEST_DATABASE_URL is not set: {test} did not run"));
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

impl TestSchema {
    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL, its host and port replaced by `127.0.0.1:port` (a proxy in front of the database).
    pub fn url_through(&self, port: u16) -> String {
        let config: tokio_postgres::Config = self.url.parse().expect("a PostgreSQL URL");
        let target = config.get_ports().first().copied().unwrap_or(5432);
        let at = self.url.find('@').map_or("postgres://".len(), |i| i + 1);
        let end = self.url[at..].find('/').map_or(self.url.len(), |i| at + i);
        let _ = target;
        format!("{}127.0.0.1:{port}{}", &self.url[..at], &self.url[end..])
    }

    /// The port of the database itself.
    pub fn port(&self) -> u16 {
        let config: tokio_postgres::Config = self.url.parse().expect("a PostgreSQL URL");
        config.get_ports().first().copied().unwrap_or(5432)
    }

    /// A connection to the database, in this schema.
    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(connection);
        client
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
