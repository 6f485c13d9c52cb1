//! Serving connections on a listener, against clients that misbehave (issue: hostile clients).
//!
//! - **At most `limits.max_connections` open connections per listener.** Past that, new
//!   connections wait in the kernel's accept queue instead of taking file descriptors the store
//!   needs; the cap is lowered at start-up to fit the open-file limit, which is first raised to its
//!   hard limit. Reaching the cap, or an accept error, is logged at most once a second.
//! - **Time limits on reading, per connection** ([`Guarded`]): a request's headers must arrive
//!   within `limits.header_read_timeout` of its first byte (of connecting, for the first request),
//!   and a kept-alive connection may be idle at most `limits.idle_timeout` between requests. A
//!   connection that breaks either is closed. (hyper's own `header_read_timeout` covers both with
//!   one duration, and arms a fresh timer for every request, so it is off and the timing lives in
//!   the connection's reads here, with one timer per connection that is re-armed lazily.)
//! - **TLS**, when the listener has a certificate: the handshake runs in the connection's own task
//!   (a slow one holds up no one else) and must finish within `limits.header_read_timeout`; the
//!   limits above then apply to the decrypted bytes.
//! - Shutdown: stop accepting, let every connection finish its in-flight request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;

/// How a listener treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

/// How long in-flight requests may finish after shutdown begins.
const DRAIN: Duration = Duration::from_secs(30);
/// File descriptors kept free of connections: the store's files, its reader pool, outbound
/// connections to upstreams and handlers.
const RESERVED_FDS: u64 = 128;

/// Raises the soft open-file limit to the hard limit, and answers how many connections fit in it
/// (`wanted` at most). Without the limit's numbers (not Unix), `wanted`.
pub fn fit_connections(wanted: usize) -> usize {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut limit = getrlimit(Resource::Nofile);
        if let (Some(current), Some(hard)) = (limit.current, limit.maximum)
            && current < hard
        {
            limit.current = Some(hard);
            if let Err(e) = setrlimit(Resource::Nofile, limit) {
                tracing::warn!(error = %e, "could not raise the open-file limit");
            }
        }
        let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
        // Two listeners share the descriptors: each gets half of what is left.
        let room = usize::try_from(soft.saturating_sub(RESERVED_FDS) / 2).unwrap_or(usize::MAX).max(1);
        if room < wanted {
            tracing::info!(
                open_file_limit = soft,
                max_connections = room,
                "limits.max_connections lowered to fit the open-file limit"
            );
        }
        room.min(wanted)
    }
    #[cfg(not(unix))]
    wanted
}

/// Serves `router` on `listener` until `stopped` turns true, then drains.
pub async fn serve(listener: TcpListener, router: Router, limits: ConnLimits, stopped: watch::Receiver<bool>) {
    serve_tls(listener, router, limits, None, stopped).await;
}

/// [`serve`], with TLS when `tls` is given.
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    tls: Option<TlsAcceptor>,
    mut stopped: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).keep_alive(true).header_read_timeout(None);
    let throttle = Throttle::default();
    loop {
        if slots.available_permits() == 0 {
            throttle.warn("connection limit reached (limits.max_connections); new connections wait to be accepted");
        }
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot,
            _ = until_true(&mut stopped) => break,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = until_true(&mut stopped) => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, say: back off instead of spinning on the error.
                throttle.warn(&format!("accept error: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        match &tls {
            None => {
                let watched =
                    graceful.watch(builder.serve_connection(TokioIo::new(Guarded::new(stream, limits)), service));
                tokio::spawn(async move {
                    let _ = watched.await;
                    drop(slot);
                });
            }
            Some(tls) => {
                let handshake = Handshake { tls: tls.clone(), builder: builder.clone(), limits };
                tokio::spawn(handshake.serve(stream, service, graceful.watcher(), slot));
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after the shutdown drain; closing them");
    }
}

/// A TLS connection's start: the handshake within `limits.header_read_timeout`, then HTTP.
struct Handshake {
    tls: TlsAcceptor,
    builder: http1::Builder,
    limits: ConnLimits,
}

impl Handshake {
    async fn serve(
        self,
        stream: TcpStream,
        service: TowerToHyperService<Router>,
        watcher: hyper_util::server::graceful::Watcher,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        match tokio::time::timeout(self.limits.header_read_timeout, self.tls.accept(stream)).await {
            Ok(Ok(stream)) => {
                let io = TokioIo::new(Guarded::new(stream, self.limits));
                let _ = watcher.watch(self.builder.serve_connection(io, service)).await;
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!("TLS handshake took longer than limits.header_read_timeout"),
        }
        drop(slot);
    }
}

async fn until_true(stopped: &mut watch::Receiver<bool>) {
    while !*stopped.borrow() {
        if stopped.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Logs a warning at most once a second.
#[derive(Default)]
struct Throttle {
    last: AtomicI64,
}

impl Throttle {
    fn warn(&self, message: &str) {
        let now = idem_core::Clock::now(&idem_core::SystemClock).millis();
        let last = self.last.load(Ordering::Relaxed);
        if now - last >= 1000 && self.last.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            tracing::warn!("{message}");
        }
    }
}

/// Where a connection is, as its reads tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request's first byte; `first` for the first request on the connection.
    Waiting { first: bool },
    /// Reading a request's headers; `matched` bytes of the `\r\n\r\n` that ends them seen so far.
    Head { matched: usize },
    /// Headers done: the body, the handler, the response. No time limit on reads here.
    Request,
}

/// A connection whose reads are held to the limits: headers within `header_read_timeout` of their
/// first byte, and no more than `idle_timeout` between requests. A response written ends a
/// request; the next byte read begins the next. `S` is the TCP stream, or the TLS stream over it.
pub struct Guarded<S = TcpStream> {
    stream: S,
    limits: ConnLimits,
    phase: Phase,
    /// When the current time limit runs out.
    due: Instant,
    /// A timer set at or before `due`. Moving `due` later leaves it be (when it fires early it is
    /// set again, to `due`), so a busy kept-alive connection touches the runtime's timer wheel
    /// about once per limit's length rather than twice per request.
    timer: Pin<Box<Sleep>>,
}

const END_OF_HEAD: &[u8; 4] = b"\r\n\r\n";

impl<S> Guarded<S> {
    pub fn new(stream: S, limits: ConnLimits) -> Self {
        // The first request gets the header timeout from connecting: a client that connects and
        // sends nothing is a slow client, not an idle one.
        let due = Instant::now() + limits.header_read_timeout;
        Self {
            stream,
            limits,
            phase: Phase::Waiting { first: true },
            due,
            timer: Box::pin(tokio::time::sleep_until(due)),
        }
    }

    fn set_deadline(&mut self, after: Duration) {
        self.due = Instant::now() + after;
        if self.due < self.timer.deadline() {
            let due = self.due;
            self.timer.as_mut().reset(due);
        }
    }

    /// Has the current time limit run out? If not, the task is woken when it may have.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        while self.timer.as_mut().poll(cx).is_ready() {
            if Instant::now() >= self.due {
                return true;
            }
            let due = self.due;
            self.timer.as_mut().reset(due);
        }
        false
    }

    /// Follows the bytes just read through the phases.
    fn saw(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut matched = match self.phase {
            Phase::Request => return,
            Phase::Waiting { first } => {
                if !first {
                    self.set_deadline(self.limits.header_read_timeout);
                }
                0
            }
            Phase::Head { matched } => matched,
        };
        for &b in bytes {
            matched = if b == END_OF_HEAD[matched] {
                matched + 1
            } else if b == b'\r' {
                1
            } else {
                0
            };
            if matched == END_OF_HEAD.len() {
                self.phase = Phase::Request;
                return;
            }
        }
        self.phase = Phase::Head { matched };
    }

    fn timed(&self) -> bool {
        !matches!(self.phase, Phase::Request)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                self.saw(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if self.timed() && self.expired(cx) {
                    let what = if matches!(self.phase, Phase::Waiting { first: false }) {
                        "the connection was idle past limits.idle_timeout"
                    } else {
                        "the request headers did not arrive within limits.header_read_timeout"
                    };
                    return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, what)));
                }
                Poll::Pending
            }
        }
    }
}

impl<S> Guarded<S> {
    /// A response is going out: the request is done, and the next one starts the idle clock. An
    /// interim `100 Continue` is not the response: the body is still to come. The timer is polled
    /// here, with the task's waker: hyper reads ahead while it answers and then waits for the
    /// socket, so an idle connection may not read again before its limit runs out.
    fn wrote(&mut self, start: &[u8], cx: &mut Context<'_>) {
        if self.phase == Phase::Request && !start.starts_with(b"HTTP/1.1 1") {
            self.phase = Phase::Waiting { first: false };
            let idle = self.limits.idle_timeout;
            self.set_deadline(idle);
            // Cannot have run out yet: `due` is `idle_timeout` away.
            let _ = self.expired(cx);
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written
            && n > 0
        {
            self.wrote(buf, cx);
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written
            && n > 0
        {
            let start = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
            self.wrote(start, cx);
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
