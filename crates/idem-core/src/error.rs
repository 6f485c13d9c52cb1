//! The two error kinds of the core boundary: input that breaks a rule (`Invalid`, always the
//! caller's fault, always names the field) and a store that could not do its job (`StoreError`).

/// Input that breaks one of the contract's rules. `field` is a JSON-path-like location
/// (`parts[2]`, `items[7].key`) so that the caller can find what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

impl Invalid {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }

    /// Places this error inside a containing field: `parts[1]` inside `items[3]` becomes
    /// `items[3].parts[1]`.
    pub fn within(mut self, outer: &str) -> Self {
        self.field = if self.field.is_empty() {
            outer.to_owned()
        } else if self.field.starts_with('[') {
            format!("{outer}{}", self.field)
        } else {
            format!("{outer}.{}", self.field)
        };
        self
    }
}

/// Why a store could not complete an operation. The text is for logs only: the HTTP layer never
/// shows it to a client, except [`StoreError::Misconfigured`]'s.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be read or written right now (disk full, file locked, database down).
    /// Nothing was changed; the operation may be retried.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The write was sent, and then the store's answer was lost (the connection broke or a time
    /// limit passed after the commit went out): it may or may not have been applied. A retry
    /// carrying the same client token learns which.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The store cannot work as it is configured (PostgreSQL reached through a transaction pooler
    /// without `[store] pooler = "transaction"`): nothing was changed, and retrying will not help
    /// until the configuration does. Its text says what to change and is shown to clients, so it
    /// never holds a secret or a server's message.
    #[error("store misconfigured: {0}")]
    Misconfigured(String),
    /// The store has been closed (the server is shutting down).
    #[error("store closed")]
    Closed,
    /// A broken invariant inside the store (corrupt row, impossible state).
    #[error("store internal error: {0}")]
    Internal(String),
}

/// An error and every cause under it, joined by `: `, each message once: `client error
/// (SendRequest): connection closed before message completed`, not just `client error
/// (SendRequest)`. (Libraries often repeat their cause in their own message; that is not repeated.)
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("client error (SendRequest)")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("connection closed before message completed")]
    struct Inner;

    #[test]
    fn the_whole_chain_is_told_once() {
        assert_eq!(chain(&Outer(Inner)), "client error (SendRequest): connection closed before message completed");
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        assert_eq!(chain(&io), "Connection refused");
    }
}
