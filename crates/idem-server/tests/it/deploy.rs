//! The operator's pack in `deploy/` names only metrics that exist: every `idem_…` name in the
//! Prometheus alert rules and the Grafana dashboard is a family on a running idem's /metrics once
//! it has done a little of everything. (`scripts/check-deploy.sh` checks the files' syntax with
//! promtool and systemd-analyze.)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use idem_core::SystemClock;
use serde_json::json;

use crate::support::TestServer;
use crate::support::receiver::Receiver;
use crate::support::upstream::Upstream;

fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("idem_") {
        let start = i + at;
        let end = start + bytes[start..].iter().take_while(|b| b.is_ascii_lowercase() || **b == b'_').count();
        let name = &text[start..end];
        let family = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
        names.insert(family.to_owned());
        i = end;
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_named_exists() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");
    let rules = std::fs::read_to_string(format!("{root}/prometheus/idem-alerts.yml")).expect("alert rules");
    let dashboard = std::fs::read_to_string(format!("{root}/grafana/idem-dashboard.json")).expect("dashboard");
    serde_json::from_str::<serde_json::Value>(&dashboard).expect("the dashboard is JSON");
    let named: BTreeSet<String> = names_in(&rules).into_iter().chain(names_in(&dashboard)).collect();
    assert!(named.len() > 10, "{named:?}");

    let upstream = Upstream::start().await;
    let receiver = Receiver::start(Duration::ZERO).await;
    let (upstream_url, handler) = (upstream.url.clone(), receiver.url.clone());
    let s = TestServer::start_with(
        move |c| {
            c.sweeper.interval = idem_server::config::ConfigDuration(Duration::from_millis(100));
            c.sources = vec![
                toml::from_str(&format!(
                    "name = \"deploy\"\nhandler_url = \"{handler}\"\nevent_id = \"/id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n"
                ))
                .expect("source"),
            ];
            c.gateway = Some(
                toml::from_str(&format!(
                    "listen = \"127.0.0.1:0\"\nupstream = \"{upstream_url}\"\n[[routes]]\npath = \"/orders\"\n"
                ))
                .expect("gateway"),
            );
        },
        Arc::new(SystemClock),
    )
    .await;
    s.post("/v1/claims/deploy", json!({"key": "k"}), 201).await;
    s.post("/v1/operations/deploy/begin", json!({"key": "k"}), 201).await;
    let event = Bytes::from_static(br#"{"id":"e1"}"#);
    let json_header = [("content-type", "application/json")];
    s.client.send_with(Method::POST, "/v1/sources/deploy/events", Some(event), &json_header).await.expect("intake");
    let gateway =
        idem_server::cli::client::ApiClient::new(s.gateway_url.as_deref().expect("gateway"), None).expect("client");
    let headers =
        [("content-type", "application/json"), ("idempotency-key", "deploy-1"), ("authorization", "Bearer d")];
    gateway.send_with(Method::POST, "/orders", Some(Bytes::from_static(b"{}")), &headers).await.expect("gateway");
    let _ = s.client.send(Method::GET, "/v1/claims/deploy/nope", None).await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // a sweeper pass, a queue sample

    let reply = s.client.send(Method::GET, "/metrics", None).await.expect("metrics");
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    let families: BTreeSet<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()).collect();
    let missing: Vec<&String> = named.iter().filter(|n| !families.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "deploy/ names metrics idem does not have: {missing:?}\nfamilies: {families:?}");
    s.stop().await;
}
