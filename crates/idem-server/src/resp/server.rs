//! The `[resp] listen` listener: each connection reads commands as they arrive (pipelined ones
//! included), runs them one after another in order, and writes their replies together. TLS when
//! `[tls]` gives the API listener a certificate: the same one. At shutdown the listener stops
//! accepting and each connection closes once its command in flight is answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use idem_core::{ClaimStore, Clock, Namespace};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;

use super::codec::{Limits, Parser};
use super::reply::Reply;
use super::script::Scripts;
use super::session::{Session, Then};
use crate::web::auth::{Caller, Tokens};

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// What every connection shares.
pub struct Resp {
    pub claims: Arc<dyn ClaimStore>,
    pub tokens: Arc<Tokens>,
    pub namespace: Namespace,
    pub clock: Arc<dyn Clock>,
    /// The largest value a `SET` stores (`limits.max_body_bytes`).
    pub max_value: usize,
    /// The scripts run or loaded, for `EVALSHA` (script.rs).
    pub(super) scripts: Scripts,
    next_id: AtomicU64,
}

impl Resp {
    pub fn new(
        claims: Arc<dyn ClaimStore>,
        tokens: Arc<Tokens>,
        namespace: Namespace,
        clock: Arc<dyn Clock>,
        max_value: usize,
    ) -> Self {
        Self { claims, tokens, namespace, clock, max_value, scripts: Scripts::default(), next_id: AtomicU64::new(1) }
    }

    /// Who a new connection is before `AUTH`: anyone when idem has no tokens (loopback use, as
    /// for HTTP), else no one.
    pub fn unauthenticated(&self) -> Caller {
        if self.tokens.is_empty() { Caller::Open } else { Caller::Anonymous }
    }

    /// `AUTH`'s answer: the token's caller, or Redis's error. The user is always `default`.
    pub fn authenticate(&self, user: &[u8], password: &[u8]) -> Result<Caller, Reply> {
        if self.tokens.is_empty() {
            return Err(Reply::error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your \
                 configuration is correct?",
            ));
        }
        let wrong = || Reply::error("WRONGPASS invalid username-password pair or user is disabled.");
        if user != b"default" {
            return Err(wrong());
        }
        let password = std::str::from_utf8(password).map_err(|_| wrong())?;
        self.tokens.find(password).map(Caller::Token).ok_or_else(wrong)
    }

    /// The parser's limits: a value may be as large as `SET` accepts, with room for the rest;
    /// before `AUTH`, Redis's bounds for a client that has not authenticated.
    fn limits(&self, authenticated: bool) -> Limits {
        Limits { max_bulk: self.max_value.saturating_add(1024), unauthenticated: !authenticated, ..Limits::default() }
    }
}

/// Serves `listener` until `stopped`, at most `max_connections` at once (the next one is told
/// so, as Redis tells it, and closed).
pub async fn serve(
    listener: TcpListener,
    resp: Arc<Resp>,
    tls: Option<TlsAcceptor>,
    max_connections: usize,
    mut stopped: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(max_connections));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.changed() => break,
        };
        let mut stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "[resp] accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
            continue;
        };
        let (resp, tls, stopped) = (Arc::clone(&resp), tls.clone(), stopped.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tls {
                None => connection(stream, resp, stopped).await,
                Some(acceptor) => {
                    if let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        connection(stream, resp, stopped).await;
                    }
                }
            }
        });
    }
}

/// One client, until it quits, breaks the protocol, disconnects, or idem stops.
async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    resp: Arc<Resp>,
    mut stopped: watch::Receiver<bool>,
) {
    let id = resp.next_id.fetch_add(1, Ordering::Relaxed);
    let mut session = Session::new(Arc::clone(&resp), id);
    let mut parser = Parser::default();
    let (mut input, mut output) = (BytesMut::with_capacity(16 * 1024), BytesMut::with_capacity(16 * 1024));
    loop {
        // Every command read so far (one at a time before `AUTH`, whose bounds it lifts for the
        // commands after it), then what broke the protocol, if anything did.
        let (mut commands, mut one_only) = (Vec::new(), false);
        let broken = loop {
            let authenticated = session.authenticated();
            match parser.parse(&mut input, &resp.limits(authenticated)) {
                Ok(Some(command)) => {
                    commands.push(command);
                    if !authenticated {
                        one_only = true;
                        break None;
                    }
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        let mut then = session.run_all(commands, &mut output).await;
        if let Some(e) = broken
            && then == Then::Continue
        {
            e.reply().encode(session.protocol, &mut output);
            then = Then::Close;
        }
        if !output.is_empty() {
            if stream.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
        }
        if then == Then::Close {
            let _ = stream.shutdown().await;
            return;
        }
        if one_only {
            // The commands after it may already be in the buffer: parse them before reading more.
            continue;
        }
        tokio::select! {
            read = stream.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = stopped.changed() => return,
        }
    }
}
