//! The model: what was acknowledged, kept in plain maps, and the answer each step should get.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_core::request::{Begin, Forget, LeaseToken, NewRequest};
use idem_core::{ClaimId, ClaimStore, ClientToken, Namespace, NewClaim, Parts, RequestStore};
use idem_log::LogStore;
use serde_json::value::RawValue;

pub const NEVER: i64 = i64::MAX;

pub type Key = (String, Vec<String>);

#[derive(Debug, Clone)]
pub struct MClaim {
    pub data: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    /// The client token it was claimed with: not in what a read shows, but in what a claim with
    /// the same token answers (after any crash too).
    pub client: Option<String>,
}

impl PartialEq for MClaim {
    /// As a read shows a claim (the client token is not shown).
    fn eq(&self, other: &Self) -> bool {
        (&self.data, self.created_at, self.expires_at) == (&other.data, other.created_at, other.expires_at)
    }
}

fn same_client(stored: &Option<String>, asked: &Option<String>) -> bool {
    stored.is_some() && stored == asked
}

fn client_token(client: &Option<String>) -> Option<ClientToken> {
    client.as_deref().map(|c| ClientToken::parse(c).expect("a valid client token"))
}

#[derive(Debug, Clone)]
pub struct MReq {
    pub completed: bool,
    /// The holder's token (unknown after a crash cut the begin short).
    pub token: Option<LeaseToken>,
    pub until: i64,
    pub fingerprint: [u8; 32],
    pub body: Vec<u8>,
    /// The client token of the begin that took it.
    pub client: Option<String>,
    /// Its fencing number (unknown after a crash cut the begin short).
    pub fence: Option<u64>,
}

/// What was acknowledged.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub claims: BTreeMap<Key, MClaim>,
    pub requests: BTreeMap<String, MReq>,
}

impl Model {
    pub fn claim(&self, key: &Key, now: i64) -> Option<&MClaim> {
        self.claims.get(key).filter(|c| c.expires_at > now)
    }

    pub fn request(&self, key: &str, now: i64) -> Option<&MReq> {
        self.requests.get(key).filter(|r| r.until > now)
    }

    /// A key's record while the store keeps it: live, or a lease that ran out whose holder may
    /// still complete, extend or release it ([`idem_core::request::kept_until`]).
    pub fn kept(&self, key: &str, now: i64) -> Option<&MReq> {
        self.requests.get(key).filter(|r| idem_core::request::kept_until(r.completed, r.until) > now)
    }
}

/// One claim of a step: parts, data, TTL, client token.
pub type ClaimItem = (Vec<String>, Option<String>, Option<Duration>, Option<String>);

/// A step that changes the store.
#[derive(Debug, Clone)]
pub enum Op {
    Claim {
        ns: String,
        items: Vec<ClaimItem>,
    },
    Delete {
        key: Key,
    },
    /// A change whatever the key holds: a condition, then a put or (`None`) a delete.
    Update {
        key: Key,
        when: When,
        put: Option<Put>,
    },
    Begin {
        key: String,
        lease: Duration,
        fingerprint: [u8; 32],
        held: Vec<u8>,
        client: Option<String>,
    },
    Complete {
        key: String,
        token: LeaseToken,
        result: Vec<u8>,
        ttl: Duration,
    },
    Release {
        key: String,
        token: LeaseToken,
    },
    Extend {
        key: String,
        token: LeaseToken,
        lease: Duration,
    },
    Forget {
        key: String,
    },
}

impl Op {
    /// The keys it can change: what decides, after a crash, whether it happened.
    pub fn claim_keys(&self) -> Vec<Key> {
        match self {
            Op::Claim { ns, items } => items.iter().map(|(p, ..)| (ns.clone(), p.clone())).collect(),
            Op::Delete { key } | Op::Update { key, .. } => vec![key.clone()],
            _ => Vec::new(),
        }
    }

    pub fn request_key(&self) -> Option<&str> {
        match self {
            Op::Begin { key, .. }
            | Op::Complete { key, .. }
            | Op::Release { key, .. }
            | Op::Extend { key, .. }
            | Op::Forget { key } => Some(key),
            _ => None,
        }
    }
}

/// An update's new data (`None`: kept) and new expiry (`None`: kept; `Some(None)`: never).
pub type Put = (Option<Option<String>>, Option<Option<i64>>);

/// An update's condition, as the model states it (the store's is [`idem_core::UpdateWhen`]).
#[derive(Debug, Clone)]
pub enum When {
    Always,
    Live,
    Expiring,
    Lasting,
    ExpiresBefore(i64),
    ExpiresAfter(i64),
    DataIs(Option<String>),
}

impl When {
    fn holds(&self, live: Option<&MClaim>) -> bool {
        match (self, live) {
            (When::Always, _) => true,
            (_, None) => false,
            (When::Live, Some(_)) => true,
            (When::Expiring, Some(c)) => c.expires_at != NEVER,
            (When::Lasting, Some(c)) => c.expires_at == NEVER,
            (When::ExpiresBefore(at), Some(c)) => c.expires_at < *at,
            (When::ExpiresAfter(at), Some(c)) => c.expires_at > *at,
            (When::DataIs(data), Some(c)) => c.data == *data,
        }
    }

    fn store(&self) -> idem_core::UpdateWhen {
        use idem_core::{Timestamp, UpdateWhen};
        match self {
            When::Always => UpdateWhen::Always,
            When::Live => UpdateWhen::Live,
            When::Expiring => UpdateWhen::Expiring,
            When::Lasting => UpdateWhen::Lasting,
            When::ExpiresBefore(at) => UpdateWhen::ExpiresBefore(Timestamp(*at)),
            When::ExpiresAfter(at) => UpdateWhen::ExpiresAfter(Timestamp(*at)),
            When::DataIs(data) => UpdateWhen::DataIs(data.clone()),
        }
    }
}

/// A claim as an answer shows it: data, made, expires.
pub type Shown = (Option<String>, i64, i64);

/// An answer, in a form both the model and the store give.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Claims(Vec<(bool, Option<String>, i64, i64)>),
    Done(bool),
    Updated(bool, Option<Shown>),
    Started,
    Held { same: bool, until: i64 },
    Completed { same: bool, result: Vec<u8>, until: i64 },
    Extended(Option<i64>),
    Forgot(&'static str),
}

pub fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

/// The model's answer to `op` at `now`, and the model after it.
pub fn expect(model: &Model, op: &Op, now: i64) -> (Answer, Model) {
    let mut after = model.clone();
    let answer = match op {
        Op::Claim { ns, items } => {
            let mut out = Vec::new();
            for (parts, data, ttl, client) in items {
                let key = (ns.clone(), parts.clone());
                match after.claim(&key, now) {
                    Some(c) => out.push((same_client(&c.client, client), c.data.clone(), c.created_at, c.expires_at)),
                    None => {
                        let expires_at = ttl.map_or(NEVER, |t| now + ms(t));
                        let claim = MClaim { data: data.clone(), created_at: now, expires_at, client: client.clone() };
                        after.claims.insert(key, claim);
                        out.push((true, data.clone(), now, expires_at));
                    }
                }
            }
            Answer::Claims(out)
        }
        Op::Delete { key } => Answer::Done(after.claim(key, now).is_some() && after.claims.remove(key).is_some()),
        Op::Update { key, when, put } => {
            let live = after.claim(key, now).cloned();
            let shown = live.as_ref().map(|c| (c.data.clone(), c.created_at, c.expires_at));
            if !when.holds(live.as_ref()) {
                return (Answer::Updated(false, shown), after);
            }
            after.claims.remove(key);
            if let Some((data, expires)) = put {
                let expires_at = match expires {
                    Some(at) => at.unwrap_or(NEVER),
                    None => live.as_ref().map_or(NEVER, |c| c.expires_at),
                };
                if expires_at > now {
                    let claim = match (data, &live) {
                        (Some(data), _) => MClaim { data: data.clone(), created_at: now, expires_at, client: None },
                        (None, Some(c)) => MClaim { expires_at, ..c.clone() },
                        (None, None) => MClaim { data: None, created_at: now, expires_at, client: None },
                    };
                    after.claims.insert(key.clone(), claim);
                }
            }
            Answer::Updated(true, shown)
        }
        Op::Begin { key, lease, fingerprint, held, client } => match after.request(key, now) {
            Some(r) if r.completed => {
                Answer::Completed { same: r.fingerprint == *fingerprint, result: r.body.clone(), until: r.until }
            }
            // A retry of the begin that took the key: its lease back.
            Some(r) if r.fingerprint == *fingerprint && same_client(&r.client, client) => Answer::Started,
            Some(r) => Answer::Held { same: r.fingerprint == *fingerprint, until: r.until },
            None => {
                let req = MReq {
                    completed: false,
                    token: None,
                    until: now + ms(*lease),
                    fingerprint: *fingerprint,
                    body: held.clone(),
                    client: client.clone(),
                    fence: None,
                };
                after.requests.insert(key.clone(), req);
                Answer::Started
            }
        },
        Op::Complete { key, token, result, ttl } => {
            let held = after.kept(key, now).is_some_and(|r| !r.completed && r.token == Some(*token));
            if held && let Some(r) = after.requests.get_mut(key) {
                *r = MReq { completed: true, token: None, until: now + ms(*ttl), body: result.clone(), ..r.clone() };
            }
            Answer::Done(held)
        }
        Op::Release { key, token } => {
            let held = after.kept(key, now).is_some_and(|r| !r.completed && r.token == Some(*token));
            if held {
                after.requests.remove(key);
            }
            Answer::Done(held)
        }
        Op::Extend { key, token, lease } => {
            let held = after.kept(key, now).is_some_and(|r| !r.completed && r.token == Some(*token));
            match after.requests.get_mut(key) {
                Some(r) if held => {
                    r.until = (now + ms(*lease)).max(r.until);
                    Answer::Extended(Some(r.until))
                }
                _ => Answer::Extended(None),
            }
        }
        Op::Forget { key } => match after.request(key, now) {
            Some(r) if r.completed => {
                after.requests.remove(key);
                Answer::Forgot("forgotten")
            }
            Some(_) => Answer::Forgot("in flight"),
            None => Answer::Forgot("absent"),
        },
    };
    (answer, after)
}

pub fn namespace(ns: &str) -> Namespace {
    Namespace::new(ns).expect("namespace")
}

pub fn parts_of(p: &[String]) -> Parts {
    Parts::new(p.to_vec()).expect("parts")
}

pub fn request_id(key: &str) -> ClaimId {
    parts_of(&[key.to_owned()]).id()
}

/// Runs `op` on the store; answers its answer, and the lease token and fence a begin got.
pub async fn run(store: &LogStore, op: &Op) -> Result<(Answer, Option<(LeaseToken, u64)>), String> {
    let e = |e: idem_core::StoreError| e.to_string();
    Ok(match op {
        Op::Claim { ns, items } => {
            let claims = items
                .iter()
                .map(|(p, data, ttl, client)| NewClaim {
                    parts: parts_of(p),
                    data: data.as_ref().map(|d| RawValue::from_string(d.clone()).expect("json")),
                    ttl: *ttl,
                    client: client_token(client),
                    created_at: None,
                })
                .collect();
            let out = store.claim(&namespace(ns), claims).await.map_err(e)?;
            let answers = out
                .into_iter()
                .map(|o| {
                    let r = o.record;
                    let data = r.data.map(|d| d.get().to_owned());
                    (o.claimed, data, r.created_at.millis(), r.expires_at.map_or(NEVER, |t| t.millis()))
                })
                .collect();
            (Answer::Claims(answers), None)
        }
        Op::Delete { key } => {
            (Answer::Done(store.delete(&namespace(&key.0), &parts_of(&key.1).id()).await.map_err(e)?), None)
        }
        Op::Update { key, when, put } => {
            use idem_core::{ClaimChange, ClaimUpdate, Keep, Timestamp};
            let keep = |k: &Option<_>, f: &dyn Fn(&_) -> _| k.as_ref().map_or(Keep::Keep, |v| Keep::Set(f(v)));
            let change = match put {
                None => ClaimChange::Delete,
                Some((data, expires)) => ClaimChange::Put {
                    data: keep(data, &|d: &Option<String>| {
                        d.as_ref().map(|d| RawValue::from_string(d.clone()).expect("json"))
                    }),
                    expires_at: match expires {
                        Some(at) => Keep::Set(at.map(Timestamp)),
                        None => Keep::Keep,
                    },
                },
            };
            let update = ClaimUpdate { parts: parts_of(&key.1), when: when.store(), change };
            let out = store.update(&namespace(&key.0), update).await.map_err(e)?;
            let shown = out.before.map(|r| {
                (r.data.map(|d| d.get().to_owned()), r.created_at.millis(), r.expires_at.map_or(NEVER, |t| t.millis()))
            });
            (Answer::Updated(out.applied, shown), None)
        }
        Op::Begin { key, lease, fingerprint, held, client } => {
            let request = NewRequest {
                id: request_id(key),
                fingerprint: *fingerprint,
                lease: *lease,
                keep: *lease,
                held: held.clone(),
                client: client_token(client),
            };
            match store.begin_request(request).await.map_err(e)? {
                Begin::Started { token, fence, .. } => (Answer::Started, Some((token, fence))),
                Begin::Held { same_fingerprint, lease_until } => {
                    (Answer::Held { same: same_fingerprint, until: lease_until.millis() }, None)
                }
                Begin::Completed { same_fingerprint, result, expires_at } => {
                    (Answer::Completed { same: same_fingerprint, result, until: expires_at.millis() }, None)
                }
            }
        }
        Op::Complete { key, token, result, ttl } => (
            Answer::Done(store.complete_request(&request_id(key), *token, result, *ttl).await.map_err(e)?.is_some()),
            None,
        ),
        Op::Release { key, token } => {
            (Answer::Done(store.release_request(&request_id(key), *token).await.map_err(e)?), None)
        }
        Op::Extend { key, token, lease } => {
            let until = store.extend_request(&request_id(key), *token, *lease).await.map_err(e)?;
            (Answer::Extended(until.map(|t| t.millis())), None)
        }
        Op::Forget { key } => {
            let forgot = match store.forget_request(&request_id(key)).await.map_err(e)? {
                Forget::Forgotten => "forgotten",
                Forget::Held => "in flight",
                Forget::Absent => "absent",
            };
            (Answer::Forgot(forgot), None)
        }
    })
}
#[derive(Debug, Clone, PartialEq)]
pub struct ReqView {
    pub completed: bool,
    pub until: i64,
    pub fingerprint: [u8; 32],
    pub body: Vec<u8>,
}

pub fn view(r: Option<&MReq>) -> Option<ReqView> {
    r.map(|r| ReqView { completed: r.completed, until: r.until, fingerprint: r.fingerprint, body: r.body.clone() })
}
