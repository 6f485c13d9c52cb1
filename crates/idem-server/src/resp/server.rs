//! The `[resp] listen` listener: each connection reads commands as they arrive (pipelined ones
//! included), runs them one after another in order, and writes their replies together. TLS when
//! `[tls]` gives the API listener a certificate: the same one. At shutdown the listener stops
//! accepting and each connection closes once its command in flight is answered.
//!
//! A connection without TLS runs where the store offers ([`ClaimStore::run_beside`]: the embedded
//! store's writer thread, between its writes, as Redis runs its clients beside its `fsync`), and
//! when all it has read is a run of claims, their replies are written onto its socket by whoever
//! learns the outcome ([`ClaimStore::claim_then`], [`Direct`]): on the embedded store, the writer
//! right after the sync. A `SET … NX` then costs no thread switch at all; with two (the command to
//! the writer, the outcome back) idem spent a third more CPU per command than Redis
//! (docs/performance.md).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use idem_core::{Beside, ClaimStore, Clock, Namespace};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio_rustls::TlsAcceptor;

use super::codec::{Limits, Parser, ProtocolError};
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
        let (resp, stopped) = (Arc::clone(&resp), stopped.clone());
        match tls.clone() {
            // On the store's writer thread when it has one (`ClaimStore::run_beside`), registered
            // there; else here.
            None => {
                let Ok(socket) = stream.into_std() else { continue };
                let claims = Arc::clone(&resp.claims);
                let task: Beside = Box::pin(async move {
                    let _slot = slot;
                    if let Ok(stream) = TcpStream::from_std(socket) {
                        let (input, output) = stream.into_split();
                        let out: Out<OwnedWriteHalf> = Out::Direct(Arc::new(Direct::new(output)));
                        connection(input, out, resp, stopped).await;
                    }
                });
                if let Err(task) = claims.run_beside(task) {
                    tokio::spawn(task);
                }
            }
            Some(acceptor) => {
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        let (input, output) = tokio::io::split(stream);
                        connection(input, Out::Task(output), resp, stopped).await;
                    }
                });
            }
        }
    }
}

/// A connection's way back to its client.
enum Out<W> {
    /// Every reply written by the connection's task (TLS).
    Task(W),
    /// A plain socket, which any thread can write to: the replies of a run of claims are written
    /// by the thread that learns their outcome (the embedded store's writer, right after its sync),
    /// the others by the connection's task.
    Direct(Arc<Direct>),
}

impl<W: AsyncWrite + Unpin> Out<W> {
    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Out::Task(stream) => stream.write_all(bytes).await,
            Out::Direct(direct) => direct.write_all(bytes).await,
        }
    }

    /// Ends the connection's sending side, once every reply is written.
    async fn close(self) {
        match self {
            Out::Task(mut stream) => drop(stream.shutdown().await),
            // The socket's sending side is shut when the last holder lets it go.
            Out::Direct(direct) => drop(direct.settle().await),
        }
    }
}

/// A client's socket as any thread may write to it, in order: replies handed to another thread
/// ([`Direct::begin`]) come before whatever the connection's task writes next, since the task
/// first waits for them ([`Direct::settle`]).
pub struct Direct {
    socket: OwnedWriteHalf,
    state: Mutex<Handed>,
    settled: Notify,
}

/// What the connection's task handed to other threads.
#[derive(Default)]
struct Handed {
    /// Runs of replies not written yet.
    in_flight: usize,
    /// What could not be written without waiting (the client reads slowly): the task writes it.
    left: Vec<u8>,
    /// A write failed: the connection is over.
    failed: bool,
}

impl Direct {
    fn new(socket: OwnedWriteHalf) -> Self {
        Self { socket, state: Mutex::new(Handed::default()), settled: Notify::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Handed> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A run of replies is handed to another thread, which calls [`Direct::deliver`].
    pub fn begin(&self) {
        self.lock().in_flight += 1;
    }

    /// Writes `bytes` without waiting (after anything left before them), keeping what the socket
    /// does not take now for the connection's task. On any thread; never blocks.
    pub fn deliver(&self, bytes: &[u8]) {
        let mut handed = self.lock();
        let mut rest = bytes;
        if handed.left.is_empty() && !handed.failed {
            match self.socket.try_write(bytes) {
                Ok(n) => rest = &bytes[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => handed.failed = true,
            }
        }
        if !handed.failed {
            handed.left.extend_from_slice(rest);
        }
        handed.in_flight -= 1;
        drop(handed);
        self.settled.notify_one();
    }

    /// Waits until every run of replies handed over is delivered, then writes what they left.
    async fn settle(&self) -> std::io::Result<()> {
        let left = loop {
            let notified = self.settled.notified();
            {
                let mut handed = self.lock();
                if handed.failed {
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                }
                if handed.in_flight == 0 {
                    break std::mem::take(&mut handed.left);
                }
            }
            notified.await;
        };
        self.write_all(&left).await
    }

    /// Writes `bytes` from the connection's task, after every reply handed over.
    async fn write_all(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            self.socket.writable().await?;
            match self.socket.try_write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// What a connection has read so far, as commands.
struct Parsed {
    commands: Vec<Vec<Bytes>>,
    /// Only the first command was taken (before `AUTH`, whose bounds it lifts for the commands
    /// after it): the rest may already be in the buffer.
    one_only: bool,
    /// What broke the protocol after them, if anything did.
    broken: Option<ProtocolError>,
}

fn parse_all(parser: &mut Parser, input: &mut BytesMut, session: &Session, resp: &Resp) -> Parsed {
    let mut commands = Vec::new();
    loop {
        let authenticated = session.authenticated();
        match parser.parse(input, &resp.limits(authenticated)) {
            Ok(Some(command)) => {
                commands.push(command);
                if !authenticated {
                    return Parsed { commands, one_only: true, broken: None };
                }
            }
            Ok(None) => return Parsed { commands, one_only: false, broken: None },
            Err(e) => return Parsed { commands, one_only: false, broken: Some(e) },
        }
    }
}

/// One client, until it quits, breaks the protocol, disconnects, or idem stops.
async fn connection<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut input_stream: R,
    mut out: Out<W>,
    resp: Arc<Resp>,
    mut stopped: watch::Receiver<bool>,
) {
    let id = resp.next_id.fetch_add(1, Ordering::Relaxed);
    let mut session = Session::new(Arc::clone(&resp), id);
    let mut parser = Parser::default();
    let (mut input, mut output) = (BytesMut::with_capacity(16 * 1024), BytesMut::with_capacity(16 * 1024));
    loop {
        let Parsed { mut commands, one_only, broken } = parse_all(&mut parser, &mut input, &session, &resp);
        if let Out::Direct(direct) = &out {
            // The replies handed over before come first.
            if direct.settle().await.is_err() {
                return;
            }
            if broken.is_none()
                && let Some(group) = session.only_claims(&commands)
            {
                session.claim_direct(group, direct).await;
                commands.clear();
            }
        }
        let mut then = session.run_all(commands, &mut output).await;
        if let Some(e) = broken
            && then == Then::Continue
        {
            e.reply().encode(session.protocol, &mut output);
            then = Then::Close;
        }
        if !output.is_empty() {
            if out.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
        }
        if then == Then::Close {
            out.close().await;
            return;
        }
        if one_only {
            // The commands after it may already be in the buffer: parse them before reading more.
            continue;
        }
        tokio::select! {
            read = input_stream.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = stopped.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpSocket;

    use super::*;

    /// Replies handed to another thread reach a client that reads slowly whole and in order, before
    /// what the connection's task writes after them.
    #[tokio::test]
    async fn replies_a_slow_reader_cannot_take_yet_arrive_whole_and_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("small receive buffer");
        let mut client = socket.connect(listener.local_addr().expect("addr")).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let (_input, output) = server.into_split();
        let direct = Arc::new(Direct::new(output));

        let first: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        direct.begin();
        direct.deliver(&first);
        assert!(!direct.lock().left.is_empty(), "the socket could not take 4 MB at once");
        // The second run is delivered later, from another thread, as the store's writer does.
        direct.begin();
        let later = Arc::clone(&direct);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            later.deliver(b"second");
        });
        let reading = tokio::spawn(async move {
            let mut received = Vec::new();
            client.read_to_end(&mut received).await.expect("read");
            received
        });
        direct.settle().await.expect("settled");
        direct.write_all(b"after").await.expect("write");
        writer.join().expect("writer");
        drop(direct);

        let received = reading.await.expect("reader");
        let mut expected = first;
        expected.extend_from_slice(b"secondafter");
        assert_eq!(received.len(), expected.len());
        assert!(received == expected, "every byte, in order");
    }
}
