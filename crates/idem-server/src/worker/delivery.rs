//! The delivery worker: leases due jobs, POSTs them with Standard Webhooks signatures, and records
//! each attempt with the transition the event lifecycle decides (`idem_core::event::lifecycle`:
//! retry, dead, result webhook). A job's lease outlasts its source's attempt timeout, so if idem
//! dies mid-attempt the lease runs out and the job is delivered again: at least once, never zero
//! times. Each source has its own concurrency bound, and a source is leased at most one round of
//! jobs beyond what is running (a ticket each, twice its concurrency in all), so a job waits for a
//! slot at most one attempt's length and its lease covers that wait as well as its attempt: no
//! result is refused for a lease that ran out while the job queued (which would deliver the event
//! twice), and a slow handler cannot starve the others. A leased job is never dropped: one the
//! store leased beyond what was asked is released at once (`ticket_each`). Redirects are never
//! followed: a 3xx is a failed attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem_core::event::{
    AttemptRecord, Change, DeliveryPolicy, Job, JobKind, JobNext, ReceiptStatus, SigningSecrets, Transition,
    after_attempt,
};
use idem_core::{Clock, EventStore, Timestamp};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::config::SourceConfig;

/// Jobs in flight at once, across sources.
const MAX_IN_FLIGHT: usize = 256;
/// How long running attempts may finish after shutdown begins; the rest are re-leased later.
const DRAIN: Duration = Duration::from_secs(10);
/// Bytes of a handler's answer kept with the attempt.
const EXCERPT: usize = 1024;
/// Bytes of a handler's answer read at most.
const READ_CAP: usize = 64 * 1024;

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client that keeps connections alive (`reuse`), or one that opens a connection per request;
/// `https://` URLs are verified against `tls`'s roots (the system's and `[tls] ca_file`).
fn http_client(reuse: bool, tls: &Arc<rustls::ClientConfig>) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    let mut builder = Client::builder(TokioExecutor::new());
    if !reuse {
        builder.pool_max_idle_per_host(0);
    }
    builder.build(crate::tls::connector(connector, tls))
}

/// A source as the worker needs it, taken from its (already parsed) config.
struct SourceRuntime {
    /// Its own pool of kept-alive connections, used until its handler answers in a way that
    /// leaves a connection unusable (a 204 or 304 with a body); from then on `fresh`, which opens
    /// a connection per request, so that no corrupted connection is reused.
    pooled: HttpClient,
    fresh: HttpClient,
    malformed: std::sync::atomic::AtomicBool,
    policy: DeliveryPolicy,
    secret: SigningSecrets,
    handler: Uri,
    result: Option<Uri>,
    timeout: Duration,
    /// How long its jobs are leased: a wait for a slot and an attempt (each at most the attempt
    /// timeout) and a margin, so that a live worker never loses a lease; when idem dies, its jobs
    /// are delivered again once it ends.
    lease: Duration,
    /// Deliveries running at once: `concurrency`.
    slots: Arc<Semaphore>,
    /// Jobs leased and not yet finished: twice `concurrency`, so that as a delivery ends the next
    /// one starts at once, without a round trip to the store, and no job queues longer than one
    /// attempt.
    tickets: Arc<Semaphore>,
    /// Free tickets worth a lease while the source is busy: an eighth of its concurrency, so that a
    /// saturated source is leased in batches, not one store round trip per finished delivery.
    batch: usize,
    /// Every other source: what a lease for this one leaves out.
    others: Vec<String>,
}

impl SourceRuntime {
    fn new(config: &SourceConfig, all: &[SourceConfig], tls: &Arc<rustls::ClientConfig>) -> Self {
        let timeout = config.attempt_timeout.0;
        Self {
            pooled: http_client(true, tls),
            fresh: http_client(false, tls),
            malformed: std::sync::atomic::AtomicBool::new(false),
            policy: config.policy(),
            secret: config.signing_secret.clone(),
            handler: config.handler_url.uri().clone(),
            result: config.result_webhook_url.as_ref().map(|u| u.uri().clone()),
            timeout,
            lease: 2 * timeout + timeout.min(Duration::from_secs(30)),
            slots: Arc::new(Semaphore::new(config.concurrency)),
            tickets: Arc::new(Semaphore::new(2 * config.concurrency)),
            batch: config.concurrency.div_ceil(8),
            others: all.iter().filter(|s| s.name != config.name).map(|s| s.name.as_str().to_owned()).collect(),
        }
    }

    fn client(&self) -> &HttpClient {
        if self.malformed.load(std::sync::atomic::Ordering::Relaxed) { &self.fresh } else { &self.pooled }
    }

    /// From now on, a connection per request: returns whether this is news.
    fn stop_reusing(&self) -> bool {
        !self.malformed.swap(true, std::sync::atomic::Ordering::Relaxed)
    }

    /// Where a job goes and the `webhook-id` it carries: the receipt id for the event (the same
    /// on every attempt and every round, so the handler can deduplicate), and for its result
    /// webhook `<receipt id>_result_<round>`: the same on that webhook's retries, another for the
    /// next round's ending (a handler that deduplicates on it still gets each round's outcome).
    fn target(&self, job: &Job) -> Option<(Uri, String)> {
        match job.kind {
            JobKind::Delivery => Some((self.handler.clone(), job.receipt_id.to_string())),
            JobKind::Result => Some((self.result.clone()?, format!("{}_result_{}", job.receipt_id, job.round))),
        }
    }
}

pub struct Delivery {
    store: Arc<dyn EventStore>,
    clock: Arc<dyn Clock>,
    sources: HashMap<String, SourceRuntime>,
    /// The sources' names in a fixed order, leased from a different one each time round.
    order: Vec<String>,
    next: AtomicUsize,
    wake: Arc<Notify>,
    /// How often failed attempts and dead receipts are told: once per source and kind every 10 s,
    /// so that a handler down under load does not flood the log.
    log: idem_core::throttle::Throttle,
}

/// What the handler (or the network) answered.
enum Answer {
    Status { code: u16, retry_after: Option<Duration>, excerpt: String },
    Error(String),
}

impl Delivery {
    pub fn new(
        sources: &[SourceConfig],
        store: Arc<dyn EventStore>,
        clock: Arc<dyn Clock>,
        wake: Arc<Notify>,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Self {
        let runtimes =
            sources.iter().map(|s| (s.name.as_str().to_owned(), SourceRuntime::new(s, sources, tls))).collect();
        let order = sources.iter().map(|s| s.name.as_str().to_owned()).collect();
        let log = idem_core::throttle::Throttle::new(Duration::from_secs(10));
        Self { store, clock, sources: runtimes, order, next: AtomicUsize::new(0), wake, log }
    }

    /// Leases and delivers until `stop`, then lets running attempts finish for a while.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut running = JoinSet::new();
        let mut stats_at = Instant::now();
        while !*stop.borrow() {
            while running.try_join_next().is_some() {}
            if stats_at.elapsed() >= Duration::from_secs(1) {
                stats_at = Instant::now();
                self.record_queue().await;
            }
            let leased = self.lease(MAX_IN_FLIGHT.saturating_sub(running.len())).await;
            let idle = leased.is_empty();
            for (job, ticket) in leased {
                let delivery = Arc::clone(&self);
                running.spawn(async move {
                    delivery.attempt(job).await;
                    drop(ticket);
                });
            }
            if idle {
                tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = stop.changed() => {}
                    Some(_) = running.join_next(), if !running.is_empty() => {}
                }
            }
        }
        let drained = tokio::time::timeout(DRAIN, async { while running.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(
                left = running.len(),
                "attempts still running at shutdown; their leases will run out and they will be delivered again"
            );
            running.abort_all();
        }
    }

    /// Leases up to `room` (at most 64) due jobs, each with a ticket of its source taken: source by
    /// source (starting from a different one each time), as many as it has free tickets, for its
    /// own lease. A job of a source no longer configured is not leased.
    async fn lease(&self, room: usize) -> Vec<(Job, OwnedSemaphorePermit)> {
        let mut room = room.min(64);
        let mut leased = Vec::new();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.order.len() {
            let Some(source) = self.sources.get(&self.order[(start + i) % self.order.len()]) else { continue };
            let free = source.tickets.available_permits();
            if free < source.batch || room == 0 {
                continue;
            }
            let free = free.min(room);
            let Ok(tickets) = Arc::clone(&source.tickets).try_acquire_many_owned(free as u32) else { continue };
            let jobs = self.store.lease_jobs(free, source.lease, &source.others).await.unwrap_or_else(|e| {
                // Tried again every 200 ms: a store down (or misconfigured) for long is told once
                // every 10 s, not five times a second.
                if let Some(more) = self.log.admit("lease/failed", Instant::now()) {
                    tracing::warn!(error = %e, more_like_it = more, "could not lease jobs; retrying");
                }
                Vec::new()
            });
            let ticketed = self.ticket_each(jobs, tickets, free).await;
            // No underflow: a job is kept only with one of the `free` tickets, and `free <= room`.
            room -= ticketed.len();
            leased.extend(ticketed);
        }
        leased
    }

    /// Gives each leased job one of the `asked` tickets held. A store leases at most what it was
    /// asked for; one that leased more (PostgreSQL did, on some plans: #42) is told of in the log,
    /// and the jobs beyond the tickets are released at once, due again for this worker's next
    /// lease or another node's. Kept here instead, they would wait for a ticket longer than their
    /// lease allows for; dropped, they would sit leased and unattempted until it ran out. The
    /// tickets no job took go back when `tickets` is dropped.
    async fn ticket_each(
        &self,
        jobs: Vec<Job>,
        mut tickets: OwnedSemaphorePermit,
        asked: usize,
    ) -> Vec<(Job, OwnedSemaphorePermit)> {
        let leased = jobs.len();
        let mut ticketed = Vec::with_capacity(leased.min(asked));
        let mut beyond = Vec::new();
        for job in jobs {
            match tickets.split(1) {
                Some(ticket) => ticketed.push((job, ticket)),
                None => beyond.push(job),
            }
        }
        if beyond.is_empty() {
            return ticketed;
        }
        let released = self.store.release_jobs(&beyond).await;
        if let Some(more) = self.log.admit("lease/beyond", Instant::now()) {
            match released {
                Ok(released) => tracing::warn!(
                    asked,
                    leased,
                    released,
                    more_like_it = more,
                    "the store leased more jobs than asked; those beyond were released to be leased again"
                ),
                Err(e) => tracing::warn!(
                    asked,
                    leased,
                    error = %e,
                    more_like_it = more,
                    "the store leased more jobs than asked, and those beyond could not be released: \
                     they will be delivered once their lease runs out"
                ),
            }
        }
        ticketed
    }

    /// Queue depth and the age of the oldest due job, as gauges.
    async fn record_queue(&self) {
        if let Ok(stats) = self.store.queue_stats().await {
            let now = self.clock.now().millis();
            let age = stats.oldest_due_at.map_or(0.0, |t| (now - t.millis()).max(0) as f64 / 1000.0);
            idem_metrics::events::jobs_due(stats.due, age);
        }
    }

    /// One attempt of a leased job: POST it, let the lifecycle decide what follows, persist that.
    async fn attempt(&self, job: Job) {
        let Some(source) = self.sources.get(&job.source) else { return };
        let Some((url, webhook_id)) = source.target(&job) else { return };
        let slot = source.slots.acquire().await;
        let started_at = self.clock.now();
        let clock_start = Instant::now();
        let answer = match tokio::time::timeout(source.timeout, self.post(source, &url, &webhook_id, &job)).await {
            Ok(answer) => answer,
            Err(_) => Answer::Error(format!("timed out after {}", idem_core::format_duration(source.timeout))),
        };
        drop(slot); // recording the attempt needs no slot of the handler's
        let (record, retry_after) = answer.into_record(&job, started_at, clock_start.elapsed());
        let transition = after_attempt(&job, record, retry_after, &source.policy, self.clock.now());
        count(&job, &transition);
        self.tell(&job, &url, &transition);
        match self.store.finish_job(&job, transition).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(receipt = %job.receipt_id, "lease ran out during an attempt; the job will be delivered again")
            }
            Err(e) => {
                tracing::warn!(error = %e, receipt = %job.receipt_id, "could not record an attempt; the job will be delivered again")
            }
        }
    }

    /// A failed attempt, and a receipt gone dead, at `warn`: which source, receipt and URL (without
    /// its query, which may hold a secret), what went wrong and what happens next.
    fn tell(&self, job: &Job, url: &Uri, t: &Transition) {
        if t.attempt.status_code.is_some_and(|c| (200..300).contains(&c)) {
            return;
        }
        let kind = if job.kind == JobKind::Delivery { "delivery" } else { "result webhook" };
        let shown = format!(
            "{}://{}{}",
            url.scheme_str().unwrap_or("http"),
            url.authority().map_or("", |a| a.as_str()),
            url.path()
        );
        let answered = match (&t.attempt.status_code, &t.attempt.error) {
            (Some(code), _) => format!("answered {code}"),
            (None, Some(error)) => error.clone(),
            (None, None) => "failed".to_owned(),
        };
        let next = match &t.job {
            JobNext::RetryAt(at) => format!("attempt {} at {}", job.attempt + 1, at.to_rfc3339()),
            JobNext::Remove => "no more attempts".to_owned(),
        };
        if let Some(more) = self.log.admit(&format!("{}/{kind}", job.source), std::time::Instant::now()) {
            tracing::warn!(
                source = job.source.as_str(),
                receipt = %job.receipt_id,
                url = shown,
                attempt = job.attempt,
                round = job.round,
                more_like_it = more,
                "a {kind} attempt failed: {answered}; next: {next}"
            );
        }
        if let Change::Receipt { status: ReceiptStatus::Dead, .. } = t.change
            && let Some(more) = self.log.admit(&format!("{}/dead", job.source), std::time::Instant::now())
        {
            tracing::warn!(
                source = job.source.as_str(),
                receipt = %job.receipt_id,
                url = shown,
                attempts = job.attempt,
                more_like_it = more,
                "a receipt went dead after {} attempts: {answered}; replay it once the handler is fixed (idem receipts replay)",
                job.attempt
            );
        }
    }

    async fn post(&self, source: &SourceRuntime, url: &Uri, webhook_id: &str, job: &Job) -> Answer {
        let secret = &source.secret;
        let timestamp = self.clock.now().millis() / 1000;
        let content_type = job.content_type.as_deref().unwrap_or("application/json");
        let request = Request::builder()
            .method(Method::POST)
            .uri(url.clone())
            .header(header::CONTENT_TYPE, content_type)
            .header(header::USER_AGENT, "idem")
            .header("webhook-id", webhook_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", secret.sign(webhook_id, timestamp, &job.body))
            .header("idem-attempt", job.attempt.to_string())
            .body(Full::new(Bytes::from(job.body.clone())));
        let request = match request {
            Ok(r) => r,
            Err(e) => return Answer::Error(format!("could not build the request: {e}")),
        };
        let response = match source.client().request(request).await {
            Ok(r) => r,
            Err(e) if e.is_connect() => {
                let host = url.authority().map_or("the handler", |a| a.as_str());
                return Answer::Error(format!("could not connect to {host}: {}", idem_core::error::chain(&e)));
            }
            Err(e) => return Answer::Error(idem_core::error::chain(&e)),
        };
        let code = response.status().as_u16();
        if carries_forbidden_body(code, response.headers()) && source.stop_reusing() {
            tracing::warn!(
                url = %url,
                status = code,
                "the handler answered {code} with a body, which HTTP forbids and which corrupts a kept-alive \
                 connection; from now on this source's deliveries open a connection each"
            );
        }
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let excerpt = read_excerpt(response.into_body()).await;
        Answer::Status { code, retry_after, excerpt }
    }
}

impl Answer {
    /// The attempt as it is recorded, and the handler's `Retry-After`.
    fn into_record(self, job: &Job, started_at: Timestamp, took: Duration) -> (AttemptRecord, Option<Duration>) {
        let (n, round, duration_ms) = (job.attempt, job.round, took.as_millis() as u64);
        let record =
            AttemptRecord { round, n, started_at, duration_ms, status_code: None, error: None, response: None };
        match self {
            Answer::Status { code, retry_after, excerpt } => {
                (AttemptRecord { status_code: Some(code), response: Some(excerpt), ..record }, retry_after)
            }
            Answer::Error(error) => (AttemptRecord { error: Some(error), ..record }, None),
        }
    }
}

/// A 204 or 304 may not carry a body; one that announces one leaves bytes on the connection that
/// would be read as the next answer on it.
fn carries_forbidden_body(status: u16, headers: &http::HeaderMap) -> bool {
    let announced = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0);
    matches!(status, 204 | 304) && announced
}

/// Reads up to `READ_CAP` bytes of a handler's answer and keeps the first `EXCERPT`.
async fn read_excerpt(mut body: hyper::body::Incoming) -> String {
    let mut excerpt = Vec::new();
    let mut read = 0;
    while read < READ_CAP {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    read += data.len();
                    let room = EXCERPT.saturating_sub(excerpt.len());
                    excerpt.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            Some(Err(_)) | None => break,
        }
    }
    String::from_utf8_lossy(&excerpt).into_owned()
}

/// Attempts by source, kind and outcome; deliveries that ended, by how.
fn count(job: &Job, t: &Transition) {
    use idem_metrics::events::{self, Attempt, Ended, Job};
    let kind = if job.kind == JobKind::Delivery { Job::Delivery } else { Job::Result };
    let ok = t.attempt.status_code.is_some_and(|c| (200..300).contains(&c));
    events::attempt(job.source.clone(), kind, if ok { Attempt::Success } else { Attempt::Failure });
    match t.change {
        Change::Receipt { status: ReceiptStatus::Completed, .. } => events::ended(job.source.clone(), Ended::Completed),
        Change::Receipt { status: ReceiptStatus::Dead, .. } => events::ended(job.source.clone(), Ended::Dead),
        _ => {}
    }
}
