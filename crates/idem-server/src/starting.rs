//! Before the store answers: `idem serve` on a PostgreSQL that is not up yet (a database started
//! after idem, as compose and Kubernetes start them, or one restarting) does not exit, which would
//! make a crash loop of it. When the first try to open the store cannot reach the database, the API
//! listener is bound and answers: `/healthz` `200` (the process is up),
//! `/readyz` and everything else `503` `store-unavailable` with `Retry-After`, while idem tries the
//! database again (every second, then up to every five); once the store opens, idem starts in full
//! on the same sockets. Without a TLS certificate that loads, or with a URL that does not parse,
//! idem still exits at once: waiting would not help.

use std::future::Future;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Config;
use crate::web::error::ApiError;
use crate::{Listeners, conn};

/// Serves the waiting answers on a duplicate of `listeners`' API socket until `ready` resolves,
/// then drains those connections and answers what `ready` gave; the socket itself stays open
/// throughout, so nothing that connects meanwhile is refused.
pub async fn serve_until<T>(
    config: &Config,
    listeners: &Listeners,
    ready: impl Future<Output = T>,
) -> std::io::Result<T> {
    let tls = match config.tls.listener() {
        Some(files) => {
            let certificate = crate::tls::Certificate::load(&files).map_err(std::io::Error::other)?;
            Some(certificate.acceptor().map_err(std::io::Error::other)?)
        }
        None => None,
    };
    let limits = conn::ConnLimits {
        max_connections: conn::fit_connections(config.limits.max_connections),
        header_read_timeout: config.limits.header_read_timeout.0,
        idle_timeout: config.limits.idle_timeout.0,
    };
    let (stop, stopped) = watch::channel(false);
    let serving = tokio::spawn(conn::serve_tls(duplicate(&listeners.api)?, waiting_router(), limits, tls, stopped));
    let answer = ready.await;
    let _ = stop.send(true);
    let _ = serving.await;
    Ok(answer)
}

/// `/healthz` as the full server answers it; the rest `503` until the store is there.
fn waiting_router() -> Router {
    Router::new()
        .route("/healthz", get(crate::api::health::healthz))
        .fallback(|| async { ApiError::Unavailable.into_response() })
}

/// Another handle on the same listening socket: dropping it leaves the socket open.
fn duplicate(listener: &TcpListener) -> std::io::Result<TcpListener> {
    let fd = listener.as_fd().try_clone_to_owned()?;
    let std = std::net::TcpListener::from(fd);
    std.set_nonblocking(true)?;
    TcpListener::from_std(std)
}

/// Tries `open` until it answers anything but `Retry`, waiting 1 s, then twice as long each time
/// up to 5 s; says once that it waits (and why), every 30 s that it still does, and when it is done.
pub async fn retrying<T, E>(mut open: impl AsyncFnMut() -> Result<T, Attempt<E>>) -> Result<T, E> {
    let started = Instant::now();
    let (mut pause, mut told) = (Duration::from_secs(1), None::<Instant>);
    loop {
        match open().await {
            Ok(opened) => {
                if told.is_some() {
                    tracing::info!(after_seconds = started.elapsed().as_secs(), "the store answers: starting in full");
                }
                return Ok(opened);
            }
            Err(Attempt::Fail(e)) => return Err(e),
            Err(Attempt::Retry(why)) => {
                if told.is_none_or(|at| at.elapsed() >= Duration::from_secs(30)) {
                    tracing::warn!(
                        error = %why,
                        waited_seconds = started.elapsed().as_secs(),
                        "the store cannot be reached yet: /healthz answers 200, /readyz and the API 503, until it can"
                    );
                    told = Some(Instant::now());
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// One try at opening the store.
pub enum Attempt<E> {
    /// Worth trying again (the database cannot be reached), with why.
    Retry(String),
    /// Trying again will not help.
    Fail(E),
}
