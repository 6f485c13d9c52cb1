//! `[[sources]]`: inbound event sources. Every value is parsed as the config is read (URLs, the
//! event-id rule, signing secrets), so intake and delivery never parse or fail on config.

use std::time::Duration;

use idem_core::Namespace;
use idem_core::event::{DeliveryPolicy, EventIdRule, SigningSecrets};
use serde::{Deserialize, Serialize};

use super::value::{ConfigDuration, HttpUrl};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Appears in `POST /v1/sources/{name}/events`; 1-64 of `[a-z0-9_.-]`.
    pub name: Namespace,
    /// Where each event is POSTed: `http://…` or `https://…`.
    pub handler_url: HttpUrl,
    /// A JSON pointer into the body (`/external_event_id`) or `header:NAME`.
    pub event_id: EventIdRule,
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: u32,
    #[serde(default = "defaults::attempt_timeout")]
    pub attempt_timeout: ConfigDuration,
    /// Waits before attempts 2, 3, …; the last one repeats.
    #[serde(default = "defaults::backoff")]
    pub backoff: Vec<ConfigDuration>,
    /// `whsec_` + base64 of 24-64 bytes: signs deliveries and result webhooks. A list while
    /// rotating: every message carries one signature per secret.
    pub signing_secret: SigningSecrets,
    /// When set, intake requires the sender's Standard Webhooks signature made with it (with any
    /// of them, for a list while rotating).
    #[serde(default)]
    pub verify_secret: Option<SigningSecrets>,
    /// Receives `receipt.completed` / `receipt.dead` when a receipt ends.
    #[serde(default)]
    pub result_webhook_url: Option<HttpUrl>,
    #[serde(default = "defaults::backoff")]
    pub result_backoff: Vec<ConfigDuration>,
    /// Deliveries to this source's handler at once, at most.
    #[serde(default = "defaults::concurrency")]
    pub concurrency: usize,
}

/// A source's defaults (docs/reference/config.md#sources), written once.
mod defaults {
    use super::ConfigDuration;
    use std::time::Duration;

    pub fn max_attempts() -> u32 {
        3
    }
    pub fn attempt_timeout() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(120))
    }
    pub fn backoff() -> Vec<ConfigDuration> {
        [10, 60, 300].map(|s| ConfigDuration(Duration::from_secs(s))).to_vec()
    }
    pub fn concurrency() -> usize {
        16
    }
}

impl SourceConfig {
    /// What the event lifecycle needs of this source.
    pub fn policy(&self) -> DeliveryPolicy {
        let durations = |list: &[ConfigDuration]| list.iter().map(|d| d.0).collect::<Vec<Duration>>();
        DeliveryPolicy {
            max_attempts: self.max_attempts,
            backoff: durations(&self.backoff),
            result_backoff: durations(&self.result_backoff),
            result_webhook: self.result_webhook_url.is_some(),
        }
    }

    /// The checks a single value's parse cannot make; errors name the field, relative to the source.
    pub(super) fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if self.max_attempts == 0 {
            return Err(("max_attempts", "must be at least 1"));
        }
        if self.concurrency == 0 {
            return Err(("concurrency", "must be at least 1"));
        }
        if self.attempt_timeout.0.is_zero() {
            return Err(("attempt_timeout", "must be longer than zero"));
        }
        if self.backoff.is_empty() {
            return Err(("backoff", "must list at least one wait"));
        }
        if self.result_backoff.is_empty() {
            return Err(("result_backoff", "must list at least one wait"));
        }
        Ok(())
    }
}
