//! A webhook receiver on a real socket: answers 200 (after an optional delay) and records the
//! `webhook-id` of every delivery it gets.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

pub struct Receiver {
    /// `http://…/handle`
    pub url: String,
    pub ids: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    pub async fn start(delay: Duration) -> Self {
        let ids = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&ids);
        let app = Router::new().route(
            "/handle",
            post(move |headers: HeaderMap| {
                let record = Arc::clone(&record);
                async move {
                    tokio::time::sleep(delay).await;
                    let id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                    record.lock().expect("lock").push(id);
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/handle", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, ids }
    }

    /// The distinct webhook-ids received so far.
    pub fn distinct(&self) -> HashSet<String> {
        self.ids.lock().expect("lock").iter().cloned().collect()
    }
}
