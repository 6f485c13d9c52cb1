//! The PostgreSQL schema and its versioned migrations. Pending migrations are applied in one
//! transaction that first takes a transaction-level advisory lock, so that several nodes starting
//! at once migrate exactly once: the second waits for the first to commit, then finds nothing to
//! do. A transaction-level lock (not a session's) and the simple protocol (no prepared
//! statement) hold through a transaction pooler too, where a session lock would be taken on one
//! server connection and released, or not, on another; and it ends with the transaction however
//! that ends. A failed migration leaves the schema as it was.

use tokio_postgres::{Client, SimpleQueryMessage};

/// Each entry moves the schema from version `i` to `i + 1`. Append only.
const MIGRATIONS: &[&str] = &[
    // 1: claims, gateway requests, events — the same model as the embedded store.
    "CREATE TABLE claims (
         ns text NOT NULL,
         id bytea NOT NULL,
         parts bytea NOT NULL,
         data text,
         created_at bigint NOT NULL,
         expires_at bigint,
         PRIMARY KEY (ns, id)
     );
     CREATE INDEX claims_by_parts ON claims (ns, parts) INCLUDE (expires_at);
     CREATE INDEX claims_by_expiry ON claims (expires_at) WHERE expires_at IS NOT NULL;
     CREATE TABLE requests (
         id bytea PRIMARY KEY,
         fingerprint bytea NOT NULL,
         state smallint NOT NULL,
         token bytea,
         until bigint NOT NULL,
         response bytea
     );
     CREATE INDEX requests_by_until ON requests (until);
     CREATE TABLE receipts (
         id text PRIMARY KEY,
         source text NOT NULL,
         event_id text NOT NULL,
         payload_hash bytea NOT NULL,
         body bytea NOT NULL,
         content_type text,
         status text NOT NULL,
         round integer NOT NULL,
         created_at bigint NOT NULL,
         updated_at bigint NOT NULL,
         result_status text,
         result_attempts integer NOT NULL DEFAULT 0,
         result_status_code integer,
         result_error text,
         UNIQUE (source, event_id)
     );
     CREATE INDEX receipts_by_source ON receipts (source, id);
     CREATE INDEX receipts_by_status ON receipts (status, id);
     CREATE TABLE jobs (
         id bigserial PRIMARY KEY,
         receipt_id text NOT NULL,
         source text NOT NULL,
         kind smallint NOT NULL,
         attempt integer NOT NULL,
         due_at bigint NOT NULL,
         lease_until bigint,
         token bytea,
         body bytea
     );
     CREATE INDEX jobs_by_due ON jobs (due_at);
     CREATE TABLE attempts (
         receipt_id text NOT NULL,
         round integer NOT NULL,
         n integer NOT NULL,
         started_at bigint NOT NULL,
         duration_ms bigint NOT NULL,
         status_code integer,
         error text,
         response text,
         PRIMARY KEY (receipt_id, round, n)
     );
     CREATE TABLE meta (key text PRIMARY KEY, value bigint);",
    // 2: finding a receipt by its event id alone (the dashboard's search, bulk replay by id).
    "CREATE INDEX receipts_by_event_id ON receipts (event_id);",
    // 3: when a retrying receipt's next attempt is due (set with its status; read only while
    // `retrying`), so that reading a receipt needs no look into the jobs.
    "ALTER TABLE receipts ADD COLUMN next_attempt_at bigint;",
    // 4: a claim's and a held key's client token (a digest), so that a retry whose first answer
    // was lost learns that it won; each take of a key gets a fencing number from one sequence, so
    // that a later holder's number is always greater.
    "ALTER TABLE claims ADD COLUMN client_token bytea;
     ALTER TABLE requests ADD COLUMN client_token bytea, ADD COLUMN fence bigint NOT NULL DEFAULT 0;
     CREATE SEQUENCE request_fences;",
    // 5: updates that change no indexed column, so PostgreSQL can make them HOT (a new row
    // version on the same page, no new index entries; the fill factor leaves room on each page):
    // - a held key's completion, extension and release change `until`, so the sweep finds rows by
    //   `sweep_at` instead, set when a key is taken (lib.rs's `sweep_requests`); rows from before
    //   start at 0, so that the first sweep gives each its own;
    // - a receipt's status changes twice per event, so it is no longer indexed: `parked` holds it
    //   only while a receipt waits for an operator (dead, discarded), for the dead-letter listings
    //   (generated from the status, so that nodes of an older version keep it too; null to null
    //   is no change, and the update stays HOT);
    //   receipts in flight are found through their delivery jobs (event.rs's `filter_sql`);
    // - a search by event id alone probes the (source, event id) key once per source instead of
    //   an index of its own (one fewer index entry per event).
    "ALTER TABLE requests ADD COLUMN sweep_at bigint NOT NULL DEFAULT 0;
     DROP INDEX requests_by_until;
     CREATE INDEX requests_by_sweep ON requests (sweep_at);
     ALTER TABLE requests SET (fillfactor = 80);
     ALTER TABLE receipts ADD COLUMN parked text
         GENERATED ALWAYS AS (CASE WHEN status IN ('dead', 'discarded') THEN status END) STORED;
     DROP INDEX receipts_by_status;
     DROP INDEX receipts_by_event_id;
     CREATE INDEX receipts_parked ON receipts (parked, id) WHERE parked IS NOT NULL;
     ALTER TABLE receipts SET (fillfactor = 80);
     ALTER TABLE jobs SET (fillfactor = 80);",
    // 6: fewer writes per event (event.rs):
    // - a lease no longer updates the receipts it delivers: a receipt is `processing` while its
    //   delivery job has been leased (`leased_at`, cleared when the job is due again for a retry),
    //   so jobs are keyed by their receipt first, for that look-up; a job is still named by its id
    //   too (older nodes, during a rolling upgrade, find it by the id alone, reading the queue);
    // - a receipt keeps its latest attempt in its own row (`last_*`), written by the same update
    //   that sets its status; the attempt before it moves to `attempts` then, so a first attempt
    //   that settles the event adds no row. Both are new nullable columns: no table is rewritten.
    "ALTER TABLE jobs ADD COLUMN leased_at bigint;
     ALTER TABLE jobs DROP CONSTRAINT jobs_pkey, ADD PRIMARY KEY (receipt_id, id);
     ALTER TABLE receipts ADD COLUMN last_round integer, ADD COLUMN last_n integer,
         ADD COLUMN last_started_at bigint, ADD COLUMN last_duration_ms bigint,
         ADD COLUMN last_status_code integer, ADD COLUMN last_error text, ADD COLUMN last_response text;",
];

/// An arbitrary constant naming idem's migration lock (the same as older versions' session lock,
/// so that old and new nodes exclude each other).
const LOCK: i64 = 0x1de3_0001;

/// Applies pending migrations; returns the schema version.
pub async fn migrate(client: &mut Client) -> Result<usize, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.batch_execute(&format!(
        "SELECT pg_advisory_xact_lock({LOCK});
         CREATE TABLE IF NOT EXISTS idem_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    .await?;
    let current = tx
        .simple_query("SELECT coalesce(max(version), 0) FROM idem_migrations")
        .await?
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse::<usize>().ok()),
            _ => None,
        })
        .unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        tx.batch_execute(sql).await?;
        tx.batch_execute(&format!("INSERT INTO idem_migrations (version) VALUES ({})", i + 1)).await?;
    }
    tx.commit().await?;
    Ok(MIGRATIONS.len())
}
