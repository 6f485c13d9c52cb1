//! A simulated idem node: the real gateway engine (idem-gateway's [`Engine`]) and the real `/v1`
//! router (idem-server's, for the operations API), on a [`Link`] to the shared store, with the
//! clock a node keeps. A node lives from its start to a crash; a restart is a new life: a new
//! engine, pool and clock, nothing carried over but the machine's clocks. What a dead life's tasks
//! still do is cut off at the seams (its store calls and upstream calls never come back).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use idem_core::{Clock, Stores};
use idem_gateway::waiters::Waiters;
use idem_gateway::{Engine, EngineConfig, GatewayBody, RoutePolicy, Routes};
use idem_server::web::AppState;
use tokio::sync::Notify;

use crate::clock::{self, Kept, Machine};
use crate::store::{Keys, Link};
use crate::unused::Unused;
use crate::upstream;
use crate::world::{self, Shared};

/// What every node of a run shares.
#[derive(Clone)]
pub struct Setup {
    pub route: RoutePolicy,
    pub call_timeout: Duration,
    /// Chance (percent) that a write's answer is lost after the store applied it.
    pub lose_answers: u64,
    pub kept: Kept,
}

/// One life of a node.
pub struct Life {
    pub life: u32,
    pub engine: Arc<Engine>,
    pub routes: Routes,
    pub router: axum::Router,
}

pub struct Node {
    pub index: usize,
    pub machine: Machine,
    lives: Mutex<Vec<Option<Arc<Life>>>>,
}

impl Node {
    pub fn new(index: usize, machine: Machine) -> Self {
        Self { index, machine, lives: Mutex::default() }
    }

    /// Life `life` of this node, started now if it has not been (a node starts when it is first
    /// needed after its restart: its clock is read then).
    pub fn life(&self, life: u32, setup: &Setup, world: &Shared, keys: &Arc<Mutex<Keys>>) -> Arc<Life> {
        let mut lives = self.lives.lock().unwrap_or_else(|e| e.into_inner());
        let at = life as usize;
        if lives.len() <= at {
            lives.resize(at + 1, None);
        }
        if let Some(started) = &lives[at] {
            return Arc::clone(started);
        }
        let error_ms = world::lock(world).rng.below(61) as i64 - 30;
        let clock = clock::kept(setup.kept, &self.machine, error_ms);
        let started = Arc::new(start(self.index, life, setup, world, keys, clock));
        lives[at] = Some(Arc::clone(&started));
        started
    }
}

fn start(
    node: usize,
    life: u32,
    setup: &Setup,
    world: &Shared,
    keys: &Arc<Mutex<Keys>>,
    clock: Arc<dyn Clock>,
) -> Life {
    let link = Arc::new(Link {
        world: Arc::clone(world),
        keys: Arc::clone(keys),
        node,
        life,
        clock: Arc::clone(&clock),
        call_timeout: setup.call_timeout,
        lose_answers: setup.lose_answers,
    });
    let engine = Arc::new(Engine::new(link.clone(), Arc::clone(&clock), EngineConfig::default()));
    let stores =
        Stores { claims: Arc::new(Unused), requests: link, events: Arc::new(Unused), lifecycle: Arc::new(Unused) };
    let config = idem_server::Config::default();
    let state = AppState::new(config, stores, clock, Arc::new(Notify::new()), Arc::new(Waiters::default()));
    Life { life, engine, routes: Routes::new([setup.route.clone()]), router: idem_server::router::app(state) }
}

/// A request on the gateway's listener, as the proxy hands it to the engine.
pub async fn gateway(life: &Life, world: &Shared, node: usize, request: Request<Bytes>) -> Response<GatewayBody> {
    let Some(route) = life.routes.find(request.method(), request.uri().path()).cloned() else {
        return idem_gateway::problem::Problem::Internal.answer("no route");
    };
    let forward = upstream::forward(Arc::clone(world), node, life.life);
    life.engine.handle(&route, request, move |r| forward(r)).await
}
