//! The upstream behind the gateway, and each node's way to it: the `forward` the engine is given.
//!
//! Every call draws what the upstream does with it: answer at once or slowly (up to 20 s), never
//! answer, refuse the connection, answer `503` (a transient failure: it did nothing), or break the
//! exchange — after the request left but before the upstream saw it, after it acted and before it
//! answered, or after its status line, mid-body. An upstream that acts records an [`Execution`] at
//! that moment, with the call's `Idem-Fencing-Token`, and refuses a call whose fence is below one
//! it has seen for the key (as a fenced resource does: an older holder's call does nothing). The
//! link from the node is the world's: a cut holds the request (or the answer) until it heals, and
//! a connection that cannot be made within 5 s is refused, as the proxy's connect timeout does.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use idem_gateway::engine::ForwardFuture;
use idem_gateway::{ForwardError, GatewayBody};

use crate::history::{Execution, Holder};
use crate::world::{self, Party, Shared};

/// The proxy's connect timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the upstream does with one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Does {
    /// Acts, then answers `201` after this long.
    Answers(Duration),
    /// Acts, and never answers.
    Hangs,
    /// Refuses the connection: nothing was sent.
    Refuses,
    /// Answers `503` at once: it did nothing.
    Transient,
    /// The connection breaks after the request left, before the upstream saw it.
    BreaksBeforeActing,
    /// Acts, then the connection breaks before the answer.
    BreaksAfterActing(Duration),
    /// Acts, answers `201`, and its body breaks after a few bytes.
    BreaksMidBody(Duration),
}

fn draw(world: &mut world::World) -> Does {
    let rng = &mut world.rng;
    match rng.below(100) {
        0..=59 => Does::Answers(rng.millis(2, 200)),
        60..=74 => Does::Answers(rng.millis(500, 20_000)),
        75..=77 => Does::Hangs,
        78..=81 => Does::Refuses,
        82..=86 => Does::Transient,
        87..=90 => Does::BreaksBeforeActing,
        91..=95 => Does::BreaksAfterActing(rng.millis(2, 3_000)),
        _ => Does::BreaksMidBody(rng.millis(2, 3_000)),
    }
}

/// The engine's `forward` for one life of node `node`.
pub fn forward(
    world: Shared,
    node: usize,
    life: u32,
) -> impl Fn(Request<Bytes>) -> ForwardFuture + Clone + Send + Sync {
    move |request: Request<Bytes>| -> ForwardFuture {
        let world = world.clone();
        Box::pin(async move { call(&world, node, life, request).await })
    }
}

/// Waits forever: a dead node's call does nothing more.
async fn dead<T>() -> T {
    std::future::pending().await
}

async fn call(
    world: &Shared,
    node: usize,
    life: u32,
    request: Request<Bytes>,
) -> Result<Response<GatewayBody>, ForwardError> {
    let began = world::lock(world).now();
    let drawn = {
        let mut w = world::lock(world);
        let now = w.now();
        w.alive(node, life, now).then(|| {
            let does = draw(&mut w);
            let sent = match w.cut(Party::Node(node), Party::Upstream, now) {
                Some(heal) if heal - now > CONNECT_TIMEOUT => None,
                Some(heal) => Some(heal),
                None => Some(now),
            };
            (w.start, sent, does)
        })
    };
    let Some((start, sent, does)) = drawn else { return dead().await };
    let Some(sent) = sent else {
        let gives_up = world::lock(world).now() + CONNECT_TIMEOUT;
        world::until(start, gives_up).await;
        return Err(ForwardError::Unreachable("connect timed out".into()));
    };
    if does == Does::Refuses {
        return Err(ForwardError::Unreachable("connection refused".into()));
    }
    let arrives = {
        let mut w = world::lock(world);
        let latency = w.rng.millis(1, 10);
        w.deliver(Party::Node(node), Party::Upstream, sent, latency)
    };
    world::until(start, arrives).await;
    let (status, done, n) = act(world, node, &request, does, began);
    // The execution this call recorded, if the upstream acted.
    let acted = (status == StatusCode::CREATED).then_some(n);
    let Some(done) = done else { return dead().await };
    let back = {
        let mut w = world::lock(world);
        let latency = w.rng.millis(1, 10);
        w.deliver(Party::Upstream, Party::Node(node), done, latency)
    };
    world::until(start, back).await;
    let alive = {
        let mut w = world::lock(world);
        if let Some(execution) = acted.and_then(|n| w.history.executions.get_mut(n)) {
            execution.answered = Some(back);
        }
        w.alive(node, life, back)
    };
    if !alive {
        return dead().await;
    }
    answer(does, status, n)
}

/// The upstream at the moment the request reaches it: whether it acts (recorded), its status, when
/// it is done (`None`: never), and which execution it was (every answer of the upstream differs).
fn act(
    world: &Shared,
    node: usize,
    request: &Request<Bytes>,
    does: Does,
    began: Duration,
) -> (StatusCode, Option<Duration>, usize) {
    let mut w = world::lock(world);
    let now = w.now();
    let n = w.history.executions.len();
    let work = match does {
        Does::Transient => return (StatusCode::SERVICE_UNAVAILABLE, Some(now), n),
        Does::BreaksBeforeActing | Does::Refuses => return (StatusCode::BAD_GATEWAY, Some(now), n),
        Does::Hangs => None,
        Does::Answers(d) | Does::BreaksAfterActing(d) | Does::BreaksMidBody(d) => Some(d),
    };
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let key = header("idempotency-key");
    let fence: u64 = header(idem_gateway::FENCING_TOKEN).parse().unwrap_or(0);
    let newest = w.history.executions.iter().filter(|e| e.key == key && !e.fenced_off).map(|e| e.fence).max();
    let fenced_off = newest.is_some_and(|newest| fence < newest);
    w.history.say(now, || {
        let refused = if fenced_off { " refused (stale fence)" } else { "" };
        format!("upstream n{node} {key} fence {fence}{refused}: {does:?}")
    });
    // When the node has the answer is set once it arrives.
    w.history.executions.push(Execution {
        key,
        fence,
        holder: Holder::Node(node),
        began,
        at: now,
        answered: None,
        fenced_off,
    });
    if fenced_off {
        return (StatusCode::CONFLICT, Some(now), n);
    }
    (StatusCode::CREATED, work.map(|d| now + d), n)
}

fn answer(does: Does, status: StatusCode, n: usize) -> Result<Response<GatewayBody>, ForwardError> {
    match does {
        Does::BreaksBeforeActing | Does::BreaksAfterActing(_) => Err(ForwardError::Failed("connection reset".into())),
        Does::BreaksMidBody(_) if status == StatusCode::CREATED => {
            let body = http_body_util::BodyExt::boxed_unsync(Broken { sent: false });
            let mut response = Response::new(body);
            *response.status_mut() = status;
            Ok(response)
        }
        _ => {
            let body = format!("{{\"status\":{},\"execution\":{n}}}", status.as_u16());
            let mut response = Response::new(idem_gateway::full(body));
            *response.status_mut() = status;
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
            Ok(response)
        }
    }
}

/// A body that gives a few bytes, then breaks.
struct Broken {
    sent: bool,
}

impl http_body::Body for Broken {
    type Data = Bytes;
    type Error = idem_gateway::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.sent {
            return Poll::Ready(Some(Err("the upstream closed the connection mid-body".into())));
        }
        self.sent = true;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(b"{\"order\":")))))
    }
}
