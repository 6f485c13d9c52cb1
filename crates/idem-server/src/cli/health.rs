//! `idem health`: is the idem at a URL ready? Exit 0 when its `GET /readyz` answers 200, else 1
//! with one line saying why. It is the container image's health check (the image has no curl), so
//! it is bounded in time and needs no token (`/readyz` is open to all).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use http::Method;

use super::client::{ApiClient, Failure};

#[derive(Debug, Args)]
pub struct HealthArgs {
    /// The server's base URL.
    #[arg(long, env = "IDEM_URL", default_value = "http://127.0.0.1:7070")]
    pub url: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub timeout: u64,
    /// Certificate authorities (PEM) to trust for an https:// server, besides the system's.
    #[arg(long, env = "IDEM_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

pub async fn run(args: HealthArgs) -> Result<(), Failure> {
    let client =
        ApiClient::with_ca(&args.url, None, args.ca_file.as_deref()).map_err(|e| Failure::usage(e.to_string()))?;
    let url = format!("{}/readyz", args.url.trim_end_matches('/'));
    let asked = tokio::time::timeout(Duration::from_secs(args.timeout), client.send(Method::GET, "/readyz", None));
    let reply = match asked.await {
        Err(_) => return Err(Failure::runtime(format!("not ready: {url} did not answer within {}s", args.timeout))),
        Ok(Err(e)) => return Err(Failure::runtime(format!("not ready: {e}"))),
        Ok(Ok(reply)) => reply,
    };
    if reply.status != http::StatusCode::OK {
        let detail = reply.json().get("detail").and_then(|d| d.as_str()).map(|d| format!(": {d}")).unwrap_or_default();
        return Err(Failure::runtime(format!("not ready: {url} answered {}{detail}", reply.status)));
    }
    println!("ready: {url} answered 200");
    Ok(())
}
