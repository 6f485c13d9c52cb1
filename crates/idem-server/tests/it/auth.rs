//! Bearer tokens: with `[auth] tokens` set, every `/v1` call needs one; health, metrics and the
//! OpenAPI document stay open for probes and scrapers.

use std::sync::Arc;

use http::Method;
use idem_core::SystemClock;
use serde_json::json;

use crate::support::{TestServer, assert_problem, expect};

#[tokio::test]
async fn v1_requires_a_configured_token() {
    let s = TestServer::start_with(
        |c| c.auth.tokens = vec![toml_secret("s3cret-token"), toml_secret("second")],
        Arc::new(SystemClock),
    )
    .await;
    let body = json!({"key": "k"});
    let reply = s.client.send(Method::POST, "/v1/claims/ns", Some(&body)).await.expect("request");
    let problem = assert_problem(&reply, 401, "no token");
    assert_eq!(reply.headers.get("www-authenticate").map(|v| v.as_bytes()), Some(&b"Bearer"[..]));
    assert!(!problem.to_string().contains("s3cret"), "the token never appears in an answer");

    let wrong = s.client_with_token("s3cret-tokem");
    let reply = wrong.send(Method::POST, "/v1/claims/ns", Some(&body)).await.expect("request");
    assert_problem(&reply, 401, "wrong token");

    expect(&s.client_with_token("s3cret-token"), Method::POST, "/v1/claims/ns", Some(body.clone()), 201).await;
    expect(&s.client_with_token("second"), Method::POST, "/v1/claims/ns", Some(body), 200).await;
    for open in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        s.expect(Method::GET, open, None, 200).await;
    }
    let lookup = s
        .client
        .send(Method::POST, "/v1/claims/ns/lookup", Some(&json!({"items": [{"key": "k"}]})))
        .await
        .expect("request");
    assert_problem(&lookup, 401, "lookup without token");
    s.stop().await;
}

fn toml_secret(token: &str) -> idem_server::config::Secret {
    toml::Value::String(token.into()).try_into().expect("a string is a secret")
}
