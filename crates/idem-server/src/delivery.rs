//! The delivery worker: leases due jobs, POSTs them with Standard Webhooks signatures, records each
//! attempt and schedules the next from the source's backoff. A job's lease outlasts its attempt
//! timeout, so if idem dies mid-attempt the lease runs out and the job is delivered again: at least
//! once, never zero times. Each source has its own concurrency bound, and sources at their bound
//! are skipped when leasing, so a slow handler cannot starve the others. Redirects are never
//! followed: a 3xx is a failed attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem_core::event::{AttemptRecord, Job, JobKind, JobOutcome, Secret, next_delay, sign};
use idem_core::{Clock, Store};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, Semaphore, watch};
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

struct SourceRuntime {
    config: SourceConfig,
    secret: Secret,
    handler: Uri,
    result: Option<Uri>,
    slots: Arc<Semaphore>,
}

pub struct Delivery {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    sources: HashMap<String, SourceRuntime>,
    client: Client<HttpConnector, Full<Bytes>>,
    lease: Duration,
    wake: Arc<Notify>,
}

enum Answer {
    Status { code: u16, retry_after: Option<Duration>, excerpt: String },
    Error(String),
}

impl Delivery {
    pub fn new(
        sources: &[SourceConfig],
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        wake: Arc<Notify>,
    ) -> Result<Self, String> {
        let mut runtimes = HashMap::new();
        for s in sources {
            let result =
                s.result_webhook_url.as_ref().map(|u| u.parse::<Uri>()).transpose().map_err(|e| e.to_string())?;
            runtimes.insert(
                s.name.clone(),
                SourceRuntime {
                    config: s.clone(),
                    secret: Secret::parse(s.signing_secret.expose())?,
                    handler: s.handler_url.parse().map_err(|e: http::uri::InvalidUri| e.to_string())?,
                    result,
                    slots: Arc::new(Semaphore::new(s.concurrency)),
                },
            );
        }
        let longest = sources.iter().map(|s| s.attempt_timeout.0).max().unwrap_or_default();
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        let client = Client::builder(TokioExecutor::new()).build(connector);
        // A lease outlasts the longest attempt, so a live worker never loses one mid-attempt; when
        // idem dies, its jobs are delivered again once the lease ends.
        let lease = longest + longest.min(Duration::from_secs(30));
        Ok(Self { store, clock, sources: runtimes, client, lease, wake })
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
            let busy: Vec<String> =
                self.sources.iter().filter(|(_, s)| s.slots.available_permits() == 0).map(|(n, _)| n.clone()).collect();
            let room = MAX_IN_FLIGHT.saturating_sub(running.len());
            let jobs =
                if room == 0 { Ok(Vec::new()) } else { self.store.lease_jobs(room.min(64), self.lease, &busy).await };
            let leased = match jobs {
                Ok(jobs) => jobs,
                Err(e) => {
                    tracing::warn!(error = %e, "could not lease jobs; retrying");
                    Vec::new()
                }
            };
            let idle = leased.is_empty();
            for job in leased {
                let delivery = Arc::clone(&self);
                running.spawn(async move { delivery.attempt(job).await });
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

    /// Queue depth and the age of the oldest due job, as gauges.
    async fn record_queue(&self) {
        if let Ok((due, oldest)) = self.store.queue_stats().await {
            metrics::gauge!("idem_jobs_due").set(due as f64);
            let age = oldest.map_or(0.0, |t| (self.clock.now().millis() - t.millis()).max(0) as f64 / 1000.0);
            metrics::gauge!("idem_jobs_oldest_due_age_seconds").set(age);
        }
    }

    async fn attempt(&self, job: Job) {
        let Some(source) = self.sources.get(&job.source) else {
            tracing::warn!(source = job.source, "a job's source is no longer configured; its lease will run out");
            return;
        };
        let slot = source.slots.acquire().await;
        let (url, webhook_id, schedule, max_attempts) = match job.kind {
            JobKind::Delivery => {
                (source.handler.clone(), job.receipt_id.to_string(), &source.config.backoff, source.config.max_attempts)
            }
            JobKind::Result => {
                let Some(url) = source.result.clone() else { return };
                let suffix = idem_core::key::hex(&Sha256::digest(&job.body)[..4]);
                let max = source.config.result_backoff.len() as u32 + 1;
                (url, format!("{}_result_{suffix}", job.receipt_id), &source.config.result_backoff, max)
            }
        };
        let started_at = self.clock.now();
        let clock_start = Instant::now();
        let answer = match tokio::time::timeout(
            source.config.attempt_timeout.0,
            self.post(&url, &webhook_id, &source.secret, &job),
        )
        .await
        {
            Ok(answer) => answer,
            Err(_) => Answer::Error(format!(
                "timed out after {}",
                idem_core::format_duration(source.config.attempt_timeout.0)
            )),
        };
        let duration_ms = clock_start.elapsed().as_millis() as u64;
        let (record, ok, retry_after) = match answer {
            Answer::Status { code, retry_after, excerpt } => {
                let record = AttemptRecord {
                    n: job.attempt,
                    started_at,
                    duration_ms,
                    status_code: Some(code),
                    error: None,
                    response: Some(excerpt),
                };
                (record, (200..300).contains(&code), retry_after)
            }
            Answer::Error(error) => (
                AttemptRecord {
                    n: job.attempt,
                    started_at,
                    duration_ms,
                    status_code: None,
                    error: Some(error),
                    response: None,
                },
                false,
                None,
            ),
        };
        let kind = if job.kind == JobKind::Delivery { "delivery" } else { "result" };
        let outcome_label = if ok { "success" } else { "failure" };
        metrics::counter!("idem_delivery_attempts_total", "source" => job.source.clone(), "kind" => kind, "outcome" => outcome_label).increment(1);
        let last_status = record.status_code;
        let outcome = if ok {
            JobOutcome::Succeeded(record)
        } else if job.attempt < max_attempts {
            let retry_at = self.clock.now().plus(next_delay(
                job.attempt,
                schedule.iter().map(|d| d.0).collect::<Vec<_>>().as_slice(),
                retry_after,
            ));
            JobOutcome::Failed { attempt: record, retry_at: Some(retry_at) }
        } else {
            JobOutcome::Failed { attempt: record, retry_at: None }
        };
        let terminal = !matches!(outcome, JobOutcome::Failed { retry_at: Some(_), .. });
        let result_body = (job.kind == JobKind::Delivery && terminal && source.result.is_some()).then(|| {
            let kind = if ok { "receipt.completed" } else { "receipt.dead" };
            serde_json::json!({
                "type": kind, "receipt_id": job.receipt_id.to_string(), "source": job.source,
                "event_id": job.event_id, "attempts": job.attempt, "last_status_code": last_status,
            })
            .to_string()
            .into_bytes()
        });
        drop(slot); // recording the attempt needs no slot of the handler's
        if job.kind == JobKind::Delivery && terminal {
            let end = if ok { "completed" } else { "dead" };
            metrics::counter!("idem_deliveries_total", "source" => job.source.clone(), "outcome" => end).increment(1);
        }
        match self.store.finish_job(&job, outcome, result_body).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(receipt = %job.receipt_id, "lease ran out during an attempt; the job will be delivered again")
            }
            Err(e) => {
                tracing::warn!(error = %e, receipt = %job.receipt_id, "could not record an attempt; the job will be delivered again")
            }
        }
    }

    async fn post(&self, url: &Uri, webhook_id: &str, secret: &Secret, job: &Job) -> Answer {
        let timestamp = self.clock.now().millis() / 1000;
        let content_type = job.content_type.as_deref().unwrap_or("application/json");
        let request = Request::builder()
            .method(Method::POST)
            .uri(url.clone())
            .header(header::CONTENT_TYPE, content_type)
            .header(header::USER_AGENT, "idem")
            .header("webhook-id", webhook_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", sign(secret, webhook_id, timestamp, &job.body))
            .header("idem-attempt", job.attempt.to_string())
            .body(Full::new(Bytes::from(job.body.clone())));
        let request = match request {
            Ok(r) => r,
            Err(e) => return Answer::Error(format!("could not build the request: {e}")),
        };
        let response = match self.client.request(request).await {
            Ok(r) => r,
            Err(e) => return Answer::Error(format!("{e}")),
        };
        let code = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut body = response.into_body();
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
        Answer::Status { code, retry_after, excerpt: String::from_utf8_lossy(&excerpt).into_owned() }
    }
}
