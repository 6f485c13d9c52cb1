//! One upstream call of a held request, as a value that can move: forward the request, then read
//! the response body up to the cap for storing. A [`Call`] is an `Unpin` future, so the engine can
//! poll it until the route's `upstream_timeout` and then hand the same call, half done, to a task
//! of its own that keeps it running: the upstream is never cancelled because the client stopped
//! waiting, and no byte already read is lost.
//!
//! How a call ends decides its key ([`Exchange`]): only a call that never reached the upstream, or
//! one the upstream itself called transient, gives the key up for a retry to run again. Once the
//! request may have been sent (a connection that broke after it was written, a body that broke
//! after the status line), the upstream may have acted: the key is kept, with an answer saying
//! the outcome is unknown, so that a retry does not run it a second time.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http::Response;
use http::response::Parts;
use http_body::Body;
use idem_core::gateway::keeps_response;

use crate::GatewayBody;
use crate::forward::{ForwardError, ForwardFuture};
use crate::headers::strip_hop_by_hop;

/// How a call ended, and so what happens to its key.
pub enum Exchange {
    /// Nothing reached the upstream (connection refused, no route): the key is released.
    Unreachable(String),
    /// The exchange broke off after the request may have been sent (`status: None`), or after the
    /// upstream's status line (its status): it may have acted, so the key is kept with an answer
    /// saying the outcome is unknown.
    Broken { status: Option<http::StatusCode>, why: String },
    /// A transient failure (5xx unless the route stores them, 408, 425, 429): released.
    Transient(Response<GatewayBody>),
    /// Larger than the cap: what was read and the rest, to pass through; released.
    TooLarge(Parts, Vec<Bytes>, GatewayBody),
    /// A whole response, hop-by-hop headers gone: stored.
    Whole(Parts, Bytes),
}

pub struct Call {
    state: State,
    cap: usize,
    store_5xx: bool,
}

enum State {
    Forwarding(ForwardFuture),
    Reading { parts: Parts, body: GatewayBody, chunks: Vec<Bytes>, total: usize },
    Ended,
}

impl Call {
    /// A call of `forward`, whose response is read whole when it is at most `cap` bytes.
    pub fn new(forward: ForwardFuture, cap: usize, store_5xx: bool) -> Self {
        Self { state: State::Forwarding(forward), cap, store_5xx }
    }
}

/// A response to read whole (or up to the cap), without its hop-by-hop headers.
fn reading(response: Response<GatewayBody>) -> State {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    State::Reading { parts, body, chunks: Vec::new(), total: 0 }
}

impl Future for Call {
    type Output = Exchange;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Exchange> {
        loop {
            if self.over_cap() {
                return Poll::Ready(self.read_too_much());
            }
            match &mut self.state {
                State::Forwarding(forward) => {
                    let response = match ready!(forward.as_mut().poll(cx)) {
                        Ok(response) => response,
                        Err(ForwardError::Unreachable(why)) => {
                            return Poll::Ready(self.end(Exchange::Unreachable(why)));
                        }
                        Err(ForwardError::Failed(why)) => {
                            return Poll::Ready(self.end(Exchange::Broken { status: None, why }));
                        }
                    };
                    if !keeps_response(response.status().as_u16(), self.store_5xx) {
                        return Poll::Ready(self.end(Exchange::Transient(response)));
                    }
                    self.state = reading(response);
                }
                State::Reading { parts, body, chunks, total } => match ready!(Pin::new(body).poll_frame(cx)) {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            *total += data.len();
                            chunks.push(data);
                        }
                    }
                    Some(Err(e)) => {
                        let broken = Exchange::Broken { status: Some(parts.status), why: e.to_string() };
                        return Poll::Ready(self.end(broken));
                    }
                    None => return Poll::Ready(self.read_whole()),
                },
                State::Ended => return Poll::Pending,
            }
        }
    }
}

/// What a call polled after its end answers: cannot happen (the engine never polls one again),
/// and were it to, the upstream may have acted.
fn read_twice() -> Exchange {
    Exchange::Broken { status: None, why: "the call was read twice".into() }
}

impl Call {
    fn end(&mut self, exchange: Exchange) -> Exchange {
        self.state = State::Ended;
        exchange
    }

    fn over_cap(&self) -> bool {
        matches!(&self.state, State::Reading { total, .. } if *total > self.cap)
    }

    fn read_whole(&mut self) -> Exchange {
        match std::mem::replace(&mut self.state, State::Ended) {
            State::Reading { parts, chunks, total, .. } => {
                let mut whole = BytesMut::with_capacity(total);
                chunks.iter().for_each(|c| whole.extend_from_slice(c));
                Exchange::Whole(parts, whole.freeze())
            }
            _ => read_twice(),
        }
    }

    fn read_too_much(&mut self) -> Exchange {
        match std::mem::replace(&mut self.state, State::Ended) {
            State::Reading { parts, body, chunks, .. } => Exchange::TooLarge(parts, chunks, body),
            _ => read_twice(),
        }
    }
}
