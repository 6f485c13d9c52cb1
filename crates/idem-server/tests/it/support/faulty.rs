//! A TCP proxy between idem and PostgreSQL that a test can break on purpose, as a network does:
//!
//! - **black-holed**: nothing moves either way on any connection, new ones are accepted and then
//!   hear nothing (a partition, a host gone without a reset); what was sent waits, as TCP would
//!   retransmit it, and flows again once healed;
//! - **an answer lost**: once the client has sent a message containing a given pattern (`COMMIT`,
//!   say), nothing comes back on that connection until healed: the write was made and its answer
//!   is lost, the ambiguous case.
//!
//! Data is paused, never dropped, so a healed connection carries on where it stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct FaultyProxy {
    pub port: u16,
    state: Arc<State>,
}

struct State {
    /// Everything flows while this is false.
    black_hole: watch::Sender<bool>,
    /// A pattern that, once sent by the client, pauses the answers on its connection.
    lose_answer_after: std::sync::Mutex<Option<Vec<u8>>>,
    /// Whether an armed pattern was seen (the loss happened).
    lost: AtomicBool,
}

impl FaultyProxy {
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(State {
            black_hole: watch::Sender::new(false),
            lose_answer_after: std::sync::Mutex::new(None),
            lost: AtomicBool::new(false),
        });
        let shared = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else { return };
                    relay(client, server, state).await;
                });
            }
        });
        Self { port, state }
    }

    pub fn black_hole(&self) {
        self.state.black_hole.send_replace(true);
    }

    /// Lets everything flow again.
    pub fn heal(&self) {
        *self.state.lose_answer_after.lock().expect("lock") = None;
        self.state.black_hole.send_replace(false);
    }

    /// The next time a client sends `pattern`, the answers on its connection stop (until healed).
    pub fn lose_answer_after(&self, pattern: &[u8]) {
        self.state.lost.store(false, Ordering::SeqCst);
        *self.state.lose_answer_after.lock().expect("lock") = Some(pattern.to_vec());
    }

    /// Whether an answer was lost since `lose_answer_after`.
    pub fn lost(&self) -> bool {
        self.state.lost.load(Ordering::SeqCst)
    }
}

async fn relay(client: TcpStream, server: TcpStream, state: Arc<State>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Per connection: answers paused once the armed pattern went by on it.
    let deaf = watch::Sender::new(false);
    let mut deaf_rx = deaf.subscribe();
    let up_state = Arc::clone(&state);
    let up = async move {
        let mut open = up_state.black_hole.subscribe();
        let mut buf = vec![0; 64 * 1024];
        loop {
            let _ = open.wait_for(|hole| !*hole).await;
            let Ok(n) = client_read.read(&mut buf).await else { return };
            if n == 0 {
                return;
            }
            let _ = open.wait_for(|hole| !*hole).await;
            let armed = up_state.lose_answer_after.lock().expect("lock").clone();
            if let Some(pattern) = armed
                && buf[..n].windows(pattern.len()).any(|w| w == pattern)
            {
                *up_state.lose_answer_after.lock().expect("lock") = None;
                up_state.lost.store(true, Ordering::SeqCst);
                deaf.send_replace(true);
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = async move {
        let mut open = state.black_hole.subscribe();
        let mut buf = vec![0; 64 * 1024];
        loop {
            let Ok(n) = server_read.read(&mut buf).await else { return };
            if n == 0 {
                return;
            }
            let _ = open.wait_for(|hole| !*hole).await;
            // A lost answer stays lost for this connection: the client gives up on it.
            if *deaf_rx.borrow_and_update() {
                let _ = deaf_rx.wait_for(|d| !*d).await;
                return;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}
