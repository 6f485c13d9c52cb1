//! Conformance checks for claims: atomic first-writer-wins, batches, lookups, prefixes, expiry.

use std::sync::Arc;
use std::time::Duration;

use idem_core::{
    ClaimChange, ClaimRecord, ClaimStore, ClaimUpdate, Keep, Parts, StoreError, StoreLifecycle, Timestamp, UpdateWhen,
};
use serde_json::value::RawValue;

use crate::{Harness, id, new_claim, ns, parts};

const TEN_SECONDS: Duration = Duration::from_secs(10);

pub async fn claim_new_then_existing<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let (store, n) = (&h.store, ns("survey"));
    let first =
        store.claim(&n, vec![new_claim(&["s1", "u3", "n2"], Some(r#"{"answer":"A"}"#), None)]).await.expect("claim");
    assert!(first[0].claimed, "a new key is claimed");
    assert_eq!(first[0].record.id, id(&["s1", "u3", "n2"]));
    assert_eq!(first[0].record.created_at, crate::START);
    assert_eq!(first[0].record.expires_at, None);

    h.clock.advance(Duration::from_secs(5));
    let second =
        store.claim(&n, vec![new_claim(&["s1", "u3", "n2"], Some(r#"{"answer":"B"}"#), None)]).await.expect("claim");
    assert!(!second[0].claimed, "an existing key is not claimed again");
    let record = &second[0].record;
    assert_eq!(record.data.as_deref().map(|d| d.get()), Some(r#"{"answer":"A"}"#), "existing record unchanged");
    assert_eq!(record.created_at, crate::START, "existing record unchanged");
    let got = store.get(&n, &record.id).await.expect("get").expect("present");
    assert_eq!(got.parts, parts(&["s1", "u3", "n2"]));
}

pub async fn key_and_one_part_forms_are_one_key<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("articles");
    let single = Parts::single("https://example.com/a".into()).expect("valid key");
    let claim = idem_core::NewClaim { parts: single, data: None, ttl: None, client: None, created_at: None };
    assert!(h.store.claim(&n, vec![claim]).await.expect("claim")[0].claimed);
    let again = h.store.claim(&n, vec![new_claim(&["https://example.com/a"], None, None)]).await.expect("claim");
    assert!(!again[0].claimed, "`key` is the one-part form of `parts`");
}

pub async fn namespaces_are_separate<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    for name in ["notified_articles", "rejected_articles"] {
        let out = h.store.claim(&ns(name), vec![new_claim(&["url"], None, None)]).await.expect("claim");
        assert!(out[0].claimed, "{name} has its own keys");
    }
    assert!(h.store.get(&ns("other"), &id(&["url"])).await.expect("get").is_none());
}

pub async fn data_round_trips_exactly<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("data");
    let data = r#"{"z":1,"a":[true,null,"ü\n",1.5e3],"nested":{"k":"v"}}"#;
    h.store.claim(&n, vec![new_claim(&["k"], Some(data), None)]).await.expect("claim");
    let got = h.store.get(&n, &id(&["k"])).await.expect("get").expect("present");
    assert_eq!(got.data.as_deref().map(|d| d.get()), Some(data));
    h.store.claim(&n, vec![new_claim(&["no-data"], None, None)]).await.expect("claim");
    let got = h.store.get(&n, &id(&["no-data"])).await.expect("get").expect("present");
    assert!(got.data.is_none());
}

pub async fn batch_answers_in_order_and_first_equal_key_wins<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("batch");
    h.store.claim(&n, vec![new_claim(&["old"], Some("0"), None)]).await.expect("claim");
    let items = vec![
        new_claim(&["a"], Some("1"), None),
        new_claim(&["old"], Some("2"), None),
        new_claim(&["b"], Some("3"), None),
        new_claim(&["a"], Some("4"), None),
    ];
    let out = h.store.claim(&n, items).await.expect("batch");
    let claimed: Vec<bool> = out.iter().map(|o| o.claimed).collect();
    assert_eq!(claimed, [true, false, true, false]);
    let data: Vec<&str> = out.iter().map(|o| o.record.data.as_deref().map_or("", |d| d.get())).collect();
    assert_eq!(data, ["1", "0", "3", "1"], "existing records come back unchanged, in request order");
}

pub async fn lookup_answers_in_request_order<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("lookup");
    let items = (0..500).filter(|i| i % 2 == 0).map(|i| new_claim(&[&format!("url-{i}")], None, None)).collect();
    h.store.claim(&n, items).await.expect("batch");
    let ids: Vec<_> = (0..500).map(|i| id(&[&format!("url-{i}")])).collect();
    let found = h.store.lookup(&n, &ids).await.expect("lookup");
    assert_eq!(found.len(), 500);
    for (i, record) in found.iter().enumerate() {
        assert_eq!(record.is_some(), i % 2 == 0, "url-{i}");
        if let Some(r) = record {
            assert_eq!(r.id, ids[i]);
        }
    }
}

pub async fn prefix_matches_whole_parts_only<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("survey");
    h.store.claim(&n, vec![new_claim(&["scenario-1", "user-3", "node-2"], None, None)]).await.expect("claim");
    h.store
        .claim(&n, vec![new_claim(&["scenario-10", "user-9", "node-1"], None, Some(TEN_SECONDS))])
        .await
        .expect("claim");
    let exists = |p: &'static [&'static str]| {
        let store = Arc::clone(&h.store);
        let n = n.clone();
        async move { store.prefix_exists(&n, &parts(p)).await.expect("prefix") }
    };
    assert!(exists(&["scenario-1", "user-3"]).await);
    assert!(exists(&["scenario-1"]).await);
    assert!(exists(&["scenario-1", "user-3", "node-2"]).await, "the whole key is its own prefix");
    assert!(!exists(&["scenario-1", "user-4"]).await);
    assert!(!exists(&["scenario-1", "user-"]).await, "a part must match whole, not as a string prefix");
    assert!(!exists(&["scenario-", "user-3"]).await);
    assert!(!exists(&["scenario-1", "user-3", "node-2", "more"]).await);
    assert!(exists(&["scenario-10"]).await);
    h.clock.advance(TEN_SECONDS);
    assert!(!exists(&["scenario-10"]).await, "an expired claim matches no prefix");
    assert!(!h.store.prefix_exists(&ns("other"), &parts(&["scenario-1"])).await.expect("prefix"));
}

pub async fn expiry_is_exact_for_every_operation<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("ttl");
    let key = ["k"];
    let out = h.store.claim(&n, vec![new_claim(&key, None, Some(TEN_SECONDS))]).await.expect("claim");
    assert_eq!(out[0].record.expires_at, Some(crate::START.plus(TEN_SECONDS)));

    h.clock.advance(TEN_SECONDS - Duration::from_millis(1));
    assert!(h.store.get(&n, &id(&key)).await.expect("get").is_some(), "alive 1 ms before expiry");
    assert!(!h.store.claim(&n, vec![new_claim(&key, None, None)]).await.expect("claim")[0].claimed);

    h.clock.advance(Duration::from_millis(1));
    assert!(h.store.get(&n, &id(&key)).await.expect("get").is_none(), "absent the moment it expires");
    assert!(h.store.lookup(&n, &[id(&key)]).await.expect("lookup")[0].is_none());
    assert!(!h.store.prefix_exists(&n, &parts(&key)).await.expect("prefix"));
    assert!(!h.store.delete(&n, &id(&key)).await.expect("delete"), "deleting an expired claim finds nothing");
}

pub async fn expired_claim_can_be_claimed_again<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("ttl");
    h.store.claim(&n, vec![new_claim(&["k"], Some("1"), Some(TEN_SECONDS))]).await.expect("claim");
    h.clock.advance(TEN_SECONDS);
    let again = h.store.claim(&n, vec![new_claim(&["k"], Some("2"), None)]).await.expect("claim");
    assert!(again[0].claimed, "an expired claim behaves as absent");
    assert_eq!(again[0].record.data.as_deref().map(|d| d.get()), Some("2"));
    assert_eq!(again[0].record.expires_at, None);
    assert_eq!(again[0].record.created_at, crate::START.plus(TEN_SECONDS));
}

/// A batch of a new key, a live one and an expired one: the new key and the expired one are taken
/// (the expired one with the batch's data and times), the live one is answered as it is. Then 100
/// concurrent batches of one expired key (each with a new key of its own): exactly one takes it
/// over, and every batch sees that one's data. (PostgreSQL inserts a batch first and takes over
/// the keys it could not insert afterwards: claim.rs's `CLAIM_SET`.)
pub async fn a_batch_takes_over_expired_keys_once<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("batch-ttl");
    let first = vec![new_claim(&["live"], Some("1"), None), new_claim(&["expiring"], Some("1"), Some(TEN_SECONDS))];
    assert!(h.store.claim(&n, first).await.expect("claim").iter().all(|o| o.claimed));
    h.clock.advance(TEN_SECONDS);
    let batch = ["new", "live", "expiring"].map(|k| new_claim(&[k], Some("2"), None)).to_vec();
    let out = h.store.claim(&n, batch).await.expect("claim");
    let seen: Vec<(bool, Option<&str>)> =
        out.iter().map(|o| (o.claimed, o.record.data.as_deref().map(|d| d.get()))).collect();
    assert_eq!(seen, [(true, Some("2")), (false, Some("1")), (true, Some("2"))]);
    assert_eq!((out[2].record.created_at, out[2].record.expires_at), (crate::START.plus(TEN_SECONDS), None));

    let contested = vec![new_claim(&["contested"], Some("0"), Some(TEN_SECONDS))];
    h.store.claim(&n, contested).await.expect("claim");
    h.clock.advance(TEN_SECONDS);
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let (store, n) = (Arc::clone(&h.store), n.clone());
            tokio::spawn(async move {
                let (data, own) = (format!("{}", i + 1), format!("own-{i}"));
                let batch = vec![new_claim(&[&own], None, None), new_claim(&["contested"], Some(&data), None)];
                store.claim(&n, batch).await
            })
        })
        .collect();
    let (mut winners, mut seen) = (0, std::collections::HashSet::new());
    for task in tasks {
        let out = task.await.expect("task").expect("claim");
        assert!(out[0].claimed, "each batch's own key is new");
        winners += usize::from(out[1].claimed);
        seen.insert(out[1].record.data.as_deref().map(|d| d.get().to_owned()));
    }
    assert_eq!(winners, 1, "one of 100 batches takes the expired key over");
    assert_eq!(seen.len(), 1, "every batch sees the winner's data: {seen:?}");
}

pub async fn sweeper_deletes_only_expired_in_bounded_batches<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("sweep");
    let expiring = (0..5).map(|i| new_claim(&[&format!("old-{i}")], None, Some(TEN_SECONDS))).collect();
    h.store.claim(&n, expiring).await.expect("batch");
    let lasting = (0..3).map(|i| new_claim(&[&format!("new-{i}")], None, Some(TEN_SECONDS * 100))).collect();
    h.store.claim(&n, lasting).await.expect("batch");
    h.store.claim(&n, vec![new_claim(&["forever"], None, None)]).await.expect("claim");
    assert_eq!(h.store.sweep_expired(10).await.expect("sweep"), 0, "nothing has expired yet");

    h.clock.advance(TEN_SECONDS);
    assert_eq!(h.store.sweep_expired(2).await.expect("sweep"), 2, "a sweep is bounded by its limit");
    assert_eq!(h.store.sweep_expired(100).await.expect("sweep"), 3);
    assert_eq!(h.store.sweep_expired(100).await.expect("sweep"), 0);
    for key in ["new-0", "new-1", "new-2", "forever"] {
        assert!(h.store.get(&n, &id(&[key])).await.expect("get").is_some(), "{key} must survive");
    }
}

pub async fn delete_removes_and_reports_absence<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("del");
    h.store.claim(&n, vec![new_claim(&["k"], None, None)]).await.expect("claim");
    assert!(h.store.delete(&n, &id(&["k"])).await.expect("delete"));
    assert!(!h.store.delete(&n, &id(&["k"])).await.expect("delete"), "a second delete finds nothing");
    assert!(h.store.get(&n, &id(&["k"])).await.expect("get").is_none());
    assert!(h.store.claim(&n, vec![new_claim(&["k"], None, None)]).await.expect("claim")[0].claimed);
}

pub async fn race_of_500_has_exactly_one_winner<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("race");
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let (store, n) = (Arc::clone(&h.store), n.clone());
            tokio::spawn(async move {
                let data = format!("{i}");
                store.claim(&n, vec![new_claim(&["one-key"], Some(&data), None)]).await
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut seen_data = std::collections::HashSet::new();
    for task in tasks {
        let out = task.await.expect("task").expect("claim");
        if out[0].claimed {
            winners.push(out[0].record.data.as_deref().map(|d| d.get().to_owned()));
        }
        seen_data.insert(out[0].record.data.as_deref().map(|d| d.get().to_owned()));
    }
    assert_eq!(winners.len(), 1, "exactly one of 500 concurrent claims wins");
    assert_eq!(seen_data.len(), 1, "every loser sees the winner's record");
}

pub async fn race_across_20_keys_has_one_winner_each<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("race20");
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let (store, n) = (Arc::clone(&h.store), n.clone());
            tokio::spawn(async move {
                let key = format!("key-{}", i % 20);
                let out = store.claim(&n, vec![new_claim(&[&key], None, None)]).await;
                (key, out)
            })
        })
        .collect();
    let mut winners = std::collections::HashMap::<String, usize>::new();
    for task in tasks {
        let (key, out) = task.await.expect("task");
        if out.expect("claim")[0].claimed {
            *winners.entry(key).or_default() += 1;
        }
    }
    assert_eq!(winners.len(), 20, "every key has a winner");
    assert!(winners.values().all(|&w| w == 1), "no key has two winners: {winners:?}");
}

pub async fn ready_when_open_and_closed_after_close<S: ClaimStore + StoreLifecycle + ?Sized>(h: &Harness<S>) {
    h.store.check_ready().await.expect("an open store is ready");
    h.store.claim(&ns("c"), vec![new_claim(&["before"], None, None)]).await.expect("claim");
    h.store.close().await;
    let after = h.store.claim(&ns("c"), vec![new_claim(&["after"], None, None)]).await;
    assert!(matches!(after, Err(StoreError::Closed)), "a closed store refuses work: {after:?}");
}

pub async fn claims_are_counted_per_namespace<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    assert!(h.store.count_claims().await.expect("count").is_empty(), "an empty store counts nothing");
    let a = (0..3).map(|i| new_claim(&[&format!("a{i}")], None, None)).collect();
    h.store.claim(&ns("alpha"), a).await.expect("claim");
    h.store.claim(&ns("beta"), vec![new_claim(&["b"], None, None)]).await.expect("claim");
    let mut counts = h.store.count_claims().await.expect("count");
    counts.sort();
    assert_eq!(counts, vec![("alpha".to_owned(), 3), ("beta".to_owned(), 1)]);
}

fn with_token(p: &[&str], token: &str) -> idem_core::NewClaim {
    idem_core::NewClaim {
        client: Some(idem_core::ClientToken::parse(token).expect("valid token")),
        ..new_claim(p, None, None)
    }
}

/// A retry whose first answer was lost (the claim was stored) carries the same client token and
/// is told `claimed: true` again; another token, or none, is told `false`. On a batch and after
/// the key's TTL has run out as well.
pub async fn a_retry_with_its_client_token_is_told_it_won<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let (store, n) = (&h.store, ns("survey"));
    assert!(store.claim(&n, vec![with_token(&["s1", "u1"], "call-1")]).await.expect("claim")[0].claimed);
    h.clock.advance(Duration::from_secs(1));
    let retry = store.claim(&n, vec![with_token(&["s1", "u1"], "call-1")]).await.expect("claim");
    assert!(retry[0].claimed, "the same client token is the same caller");
    assert_eq!(retry[0].record.created_at, crate::START, "and the record is the one stored first");
    assert!(!store.claim(&n, vec![with_token(&["s1", "u1"], "call-2")]).await.expect("claim")[0].claimed);
    assert!(!store.claim(&n, vec![new_claim(&["s1", "u1"], None, None)]).await.expect("claim")[0].claimed);

    let batch = vec![with_token(&["b", "1"], "batch-7/0"), with_token(&["b", "2"], "batch-7/1")];
    store.claim(&n, vec![new_claim(&["b", "2"], None, None)]).await.expect("someone else claims b/2 first");
    let first = store.claim(&n, batch.clone()).await.expect("batch");
    assert_eq!(first.iter().map(|o| o.claimed).collect::<Vec<_>>(), [true, false]);
    let again = store.claim(&n, batch).await.expect("batch retried");
    assert_eq!(again.iter().map(|o| o.claimed).collect::<Vec<_>>(), [true, false], "each item as it was");

    let ttl = Some(TEN_SECONDS);
    let expiring = idem_core::NewClaim { ttl, ..with_token(&["t"], "call-3") };
    assert!(store.claim(&n, vec![expiring.clone()]).await.expect("claim")[0].claimed);
    h.clock.advance(TEN_SECONDS);
    let other = idem_core::NewClaim { ttl, ..with_token(&["t"], "call-4") };
    assert!(store.claim(&n, vec![other]).await.expect("claim")[0].claimed, "expired: a new claim");
    assert!(!store.claim(&n, vec![expiring]).await.expect("claim")[0].claimed, "the old caller lost it since");
}

/// Of 200 concurrent claims of one key, each with its own client token and each sent twice, the
/// winner's two are told `claimed: true` and no other.
pub async fn a_race_with_client_tokens_tells_one_caller_it_won<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = Arc::clone(&h.store);
            tokio::spawn(async move {
                let claim = with_token(&["contended"], &format!("caller-{i}"));
                let first = store.claim(&ns("race"), vec![claim.clone()]).await.expect("claim")[0].claimed;
                let retry = store.claim(&ns("race"), vec![claim]).await.expect("claim")[0].claimed;
                (i, first, retry)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let (i, first, retry) = task.await.expect("task");
        assert_eq!(first, retry, "caller {i}: its retry is told what it was told first");
        if first {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "one caller won: {winners:?}");
}

fn listed(records: &[idem_core::ClaimRecord]) -> Vec<String> {
    records.iter().map(|r| r.parts.as_slice().join("/")).collect()
}

/// A prefix's live claims come in parts order, page by page from a cursor, with and without
/// expiry, whole parts only, this namespace only, the claim that is the prefix itself included.
pub async fn list_pages_a_prefix_in_parts_order<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let (store, n) = (&h.store, ns("survey"));
    let ttl = Some(TEN_SECONDS);
    let mut claims = vec![
        new_claim(&["s1"], None, None),
        new_claim(&["s1", "u2", "n1"], Some(r#"{"answer":"B"}"#), None),
        new_claim(&["s1", "u1", "n2"], None, ttl),
        new_claim(&["s1", "u1", "n1"], Some(r#"{"answer":"A"}"#), None),
        new_claim(&["s10", "u1", "n1"], None, None),
        new_claim(&["s2", "u1", "n1"], None, None),
        new_claim(&["s1", "u3"], None, Some(Duration::from_secs(1))),
    ];
    claims.extend((0..40).map(|i| new_claim(&["s1", "bulk", &format!("{i:02}")], None, None)));
    store.claim(&n, claims).await.expect("claim");
    store.claim(&ns("other"), vec![new_claim(&["s1", "u1", "n1"], None, None)]).await.expect("claim");
    h.clock.advance(Duration::from_secs(1));

    let all = store.list(&n, &parts(&["s1"]), None, 1000).await.expect("list");
    let mut want: Vec<String> = vec!["s1".into()];
    want.extend((0..40).map(|i| format!("s1/bulk/{i:02}")));
    want.extend(["s1/u1/n1", "s1/u1/n2", "s1/u2/n1"].map(String::from));
    assert_eq!(listed(&all), want, "parts order; s1/u3 has expired; s10 and s2 are other prefixes");
    assert_eq!(
        all.iter()
            .find(|r| r.parts == parts(&["s1", "u1", "n1"]))
            .and_then(|r| r.data.as_deref().map(|d| d.get().to_owned())),
        Some(r#"{"answer":"A"}"#.to_owned())
    );

    let mut paged = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = store.list(&n, &parts(&["s1"]), after.as_deref(), 7).await.expect("list");
        paged.extend(listed(&page));
        match page.last() {
            Some(last) if page.len() == 7 => after = Some(last.parts.encode()),
            _ => break,
        }
    }
    assert_eq!(paged, want, "pages from a cursor give the same, once each");

    let deeper = store.list(&n, &parts(&["s1", "u1"]), None, 100).await.expect("list");
    assert_eq!(listed(&deeper), ["s1/u1/n1", "s1/u1/n2"]);
    assert!(store.list(&n, &parts(&["s3"]), None, 100).await.expect("list").is_empty());
    h.clock.advance(TEN_SECONDS);
    let later = store.list(&n, &parts(&["s1", "u1"]), None, 100).await.expect("list");
    assert_eq!(listed(&later), ["s1/u1/n1"], "expired claims are absent");
}

/// Deleting a prefix removes its live claims in bounded steps, answers how many, and leaves
/// other prefixes and namespaces alone; the keys can be claimed again.
pub async fn delete_prefix_removes_only_that_prefix<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let (store, n) = (&h.store, ns("survey"));
    let mut claims: Vec<_> = (0..25).map(|i| new_claim(&["s1", &format!("u{i}")], None, None)).collect();
    claims.push(new_claim(&["s10", "u1"], None, None));
    claims.push(new_claim(&["s1"], None, None));
    store.claim(&n, claims).await.expect("claim");
    store.claim(&ns("other"), vec![new_claim(&["s1", "u1"], None, None)]).await.expect("claim");

    assert_eq!(store.delete_prefix(&n, &parts(&["s1"]), 10).await.expect("delete"), 10, "at most the limit");
    let mut rest = 10;
    while rest > 0 {
        rest = store.delete_prefix(&n, &parts(&["s1"]), 10).await.expect("delete");
    }
    assert!(store.list(&n, &parts(&["s1"]), None, 100).await.expect("list").is_empty());
    assert_eq!(listed(&store.list(&n, &parts(&["s10"]), None, 100).await.expect("list")), ["s10/u1"]);
    assert!(store.get(&ns("other"), &id(&["s1", "u1"])).await.expect("get").is_some(), "another namespace");
    assert!(!store.prefix_exists(&n, &parts(&["s1"])).await.expect("prefix"));
    assert!(store.claim(&n, vec![new_claim(&["s1", "u3"], None, None)]).await.expect("claim")[0].claimed);
    assert_eq!(store.delete_prefix(&n, &parts(&["nothing"]), 10).await.expect("delete"), 0);
}

/// A record imported from another store keeps when it was made, and its TTL counts from then:
/// one made 80 days ago with 90 days to live expires in 10; one whose time ran out is absent.
pub async fn an_imported_claim_keeps_when_it_was_made<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let (store, n) = (&h.store, ns("notified_articles"));
    let day = Duration::from_secs(86_400);
    let ago = |d: u64| idem_core::Timestamp(crate::START.millis() - (day * d as u32).as_millis() as i64);
    let import = |key: &str, made| idem_core::NewClaim {
        created_at: Some(made),
        ..new_claim(&[key], Some(r#"{"legacy":true}"#), Some(day * 90))
    };
    let out = store.claim(&n, vec![import("https://a", ago(80)), import("https://b", ago(100))]).await.expect("claim");
    assert_eq!(out[0].record.created_at, ago(80));
    assert_eq!(out[0].record.expires_at, Some(crate::START.plus(day * 10)), "90 days from when it was made");
    let got = store.get(&n, &id(&["https://a"])).await.expect("get").expect("live");
    assert_eq!(got.created_at, ago(80));
    assert!(store.get(&n, &id(&["https://b"])).await.expect("get").is_none(), "its 90 days ended 10 days ago");
    let future = idem_core::Timestamp(crate::START.millis() + 3_600_000);
    let out = store.claim(&n, vec![import("https://c", future)]).await.expect("claim");
    assert_eq!(out[0].record.created_at, crate::START, "never later than now");
}

fn put(p: &[&str], when: UpdateWhen, data: Keep<Option<&str>>, expires_at: Keep<Option<Timestamp>>) -> ClaimUpdate {
    let data = match data {
        Keep::Keep => Keep::Keep,
        Keep::Set(d) => Keep::Set(d.map(|d| RawValue::from_string(d.to_owned()).expect("test data is JSON"))),
    };
    ClaimUpdate { parts: parts(p), when, change: ClaimChange::Put { data, expires_at } }
}

fn data_of(record: &Option<ClaimRecord>) -> Option<String> {
    record.as_ref().and_then(|r| r.data.as_deref()).map(|d| d.get().to_owned())
}

/// A plain `SET`: creates a key absent, replaces one live (a new claim, made now, without the
/// client token it was claimed with), and says what it replaced.
pub async fn an_update_replaces_whatever_the_key_holds<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let (store, n) = (&h.store, ns("set"));
    let set = |data| put(&["k"], UpdateWhen::Always, Keep::Set(Some(data)), Keep::Set(None));
    let out = store.update(&n, set(r#""a""#)).await.expect("update");
    assert!(out.applied && out.before.is_none(), "created");
    let got = store.get(&n, &id(&["k"])).await.expect("get").expect("created");
    assert_eq!(
        (got.data.as_deref().map(RawValue::get), got.created_at, got.expires_at),
        (Some(r#""a""#), crate::START, None)
    );

    h.clock.advance(Duration::from_secs(5));
    let out = store.update(&n, set(r#""b""#)).await.expect("update");
    assert_eq!((out.applied, data_of(&out.before)), (true, Some(r#""a""#.into())), "replaced, the old one answered");
    let got = store.get(&n, &id(&["k"])).await.expect("get").expect("present");
    assert_eq!(got.data.as_deref().map(RawValue::get), Some(r#""b""#));
    assert_eq!(got.created_at, crate::START.plus(Duration::from_secs(5)), "new data is a new claim");
    assert_eq!(store.count_claims().await.expect("count"), vec![("set".to_owned(), 1)], "one key, counted once");

    assert!(store.claim(&n, vec![with_token(&["t"], "call-1")]).await.expect("claim")[0].claimed);
    store.update(&n, put(&["t"], UpdateWhen::Always, Keep::Set(Some("1")), Keep::Keep)).await.expect("update");
    let retry = store.claim(&n, vec![with_token(&["t"], "call-1")]).await.expect("claim");
    assert!(!retry[0].claimed, "replaced data is no longer the claim the token made");
    assert!(!store.claim(&n, vec![new_claim(&["k"], Some("2"), None)]).await.expect("claim")[0].claimed);
}

/// `EXPIRE`, `PERSIST`, `SET … KEEPTTL`: what an update does not set stays as it was.
pub async fn an_update_keeps_what_it_does_not_set<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let (store, n) = (&h.store, ns("keep"));
    let claim = idem_core::NewClaim { ttl: Some(TEN_SECONDS), ..with_token(&["k"], "call-1") };
    let claim = idem_core::NewClaim { data: Some(RawValue::from_string("7".into()).expect("json")), ..claim };
    assert!(store.claim(&n, vec![claim.clone()]).await.expect("claim")[0].claimed);
    h.clock.advance(Duration::from_secs(1));
    let later = crate::START.plus(Duration::from_secs(60));
    let out = store.update(&n, put(&["k"], UpdateWhen::Live, Keep::Keep, Keep::Set(Some(later)))).await;
    assert!(out.expect("update").applied);
    let got = store.get(&n, &id(&["k"])).await.expect("get").expect("present");
    assert_eq!(
        (got.data.as_deref().map(RawValue::get), got.created_at),
        (Some("7"), crate::START),
        "data and age kept"
    );
    assert_eq!(got.expires_at, Some(later));
    assert!(store.claim(&n, vec![claim]).await.expect("claim")[0].claimed, "still the claim its token made");

    let out = store.update(&n, put(&["k"], UpdateWhen::Live, Keep::Set(Some("8")), Keep::Keep)).await;
    assert!(out.expect("update").applied);
    assert_eq!(store.get(&n, &id(&["k"])).await.expect("get").expect("present").expires_at, Some(later), "KEEPTTL");
    store.update(&n, put(&["k"], UpdateWhen::Expiring, Keep::Keep, Keep::Set(None))).await.expect("persist");
    h.clock.advance(Duration::from_secs(3600));
    let got = store.get(&n, &id(&["k"])).await.expect("get").expect("never expires now");
    assert_eq!((got.data.as_deref().map(RawValue::get), got.expires_at), (Some("8"), None));
}

/// Each condition, as Redis's `XX`, `NX`, `GT`, `LT` and compare-and-delete state it; an expired
/// key is absent; a condition that fails changes nothing.
pub async fn update_conditions_hold_as_stated<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let (store, n) = (&h.store, ns("when"));
    let at = |s| crate::START.plus(Duration::from_secs(s));
    let expire = |p: &[&str], when, s| put(p, when, Keep::Keep, Keep::Set(Some(at(s))));
    let applied = |update| async { store.update(&n, update).await.expect("update").applied };
    assert!(!applied(expire(&["absent"], UpdateWhen::Live, 5)).await, "XX: nothing to change");
    assert!(!applied(expire(&["absent"], UpdateWhen::ExpiresAfter(at(99)), 5)).await);
    assert!(store.get(&n, &id(&["absent"])).await.expect("get").is_none(), "and nothing was created");

    store.claim(&n, vec![new_claim(&["lasting"], Some("1"), None)]).await.expect("claim");
    store.claim(&n, vec![new_claim(&["expiring"], Some("2"), Some(TEN_SECONDS))]).await.expect("claim");
    assert!(!applied(expire(&["lasting"], UpdateWhen::Expiring, 5)).await);
    assert!(!applied(expire(&["expiring"], UpdateWhen::Lasting, 5)).await);
    assert!(!applied(expire(&["lasting"], UpdateWhen::ExpiresBefore(at(20)), 20)).await, "GT: never is not sooner");
    assert!(!applied(expire(&["expiring"], UpdateWhen::ExpiresBefore(at(5)), 5)).await, "GT: 10 s is not sooner");
    assert!(!applied(expire(&["expiring"], UpdateWhen::ExpiresAfter(at(20)), 20)).await, "LT: 10 s is not later");
    assert_eq!(store.get(&n, &id(&["expiring"])).await.expect("get").expect("live").expires_at, Some(at(10)));
    assert!(applied(expire(&["expiring"], UpdateWhen::ExpiresBefore(at(20)), 20)).await, "GT: later");
    assert!(applied(expire(&["expiring"], UpdateWhen::ExpiresAfter(at(15)), 15)).await, "LT: sooner");
    assert!(applied(expire(&["lasting"], UpdateWhen::ExpiresAfter(at(30)), 30)).await, "LT: never is later");
    assert_eq!(store.get(&n, &id(&["lasting"])).await.expect("get").expect("live").expires_at, Some(at(30)));

    let delete_if = |data: &str| ClaimUpdate {
        parts: parts(&["expiring"]),
        when: UpdateWhen::DataIs(Some(data.to_owned())),
        change: ClaimChange::Delete,
    };
    assert!(!applied(delete_if("1")).await, "another owner's value is not deleted");
    assert!(applied(delete_if("2")).await, "the owner's is");
    assert!(store.get(&n, &id(&["expiring"])).await.expect("get").is_none());

    h.clock.advance(Duration::from_secs(30));
    assert!(!applied(expire(&["lasting"], UpdateWhen::Live, 99)).await, "expired is absent");
    let out = store.update(&n, put(&["lasting"], UpdateWhen::Always, Keep::Keep, Keep::Set(None))).await;
    let out = out.expect("update");
    assert!(out.applied && out.before.is_none(), "an expired key is replaced as absent");
    let got = store.get(&n, &id(&["lasting"])).await.expect("get").expect("made again");
    assert!(got.data.is_none(), "with no data: the expired key's is not kept");
}

/// An expiry not after now removes the key (`EXPIRE k 0`), as a delete does.
pub async fn an_update_to_a_past_expiry_deletes<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let (store, n) = (&h.store, ns("past"));
    store.claim(&n, vec![new_claim(&["k"], Some("1"), None)]).await.expect("claim");
    let out = store.update(&n, put(&["k"], UpdateWhen::Live, Keep::Keep, Keep::Set(Some(crate::START)))).await;
    let out = out.expect("update");
    assert_eq!((out.applied, data_of(&out.before)), (true, Some("1".into())));
    assert!(store.get(&n, &id(&["k"])).await.expect("get").is_none());
    assert_eq!(store.count_claims().await.expect("count").iter().map(|(_, c)| c).sum::<u64>(), 0);
    let absent = store.update(&n, put(&["k"], UpdateWhen::Always, Keep::Set(Some("2")), Keep::Set(Some(crate::START))));
    assert!(absent.await.expect("update").applied, "set, and at once expired");
    assert!(store.get(&n, &id(&["k"])).await.expect("get").is_none());
    assert!(store.claim(&n, vec![new_claim(&["k"], Some("3"), None)]).await.expect("claim")[0].claimed);
}

/// Compare-and-set is atomic: 40 tasks each add one to a counter by reading it and updating it
/// only if it still holds what they read, over and over until they succeed: it ends at 40.
pub async fn concurrent_updates_of_one_key_lose_nothing<S: ClaimStore + ?Sized>(h: &Harness<S>) {
    let n = ns("cas");
    h.store.claim(&n, vec![new_claim(&["counter"], Some("0"), None)]).await.expect("claim");
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let (store, n) = (Arc::clone(&h.store), n.clone());
            tokio::spawn(async move {
                loop {
                    let now = store.get(&n, &id(&["counter"])).await.expect("get").expect("present");
                    let seen = now.data.as_deref().map(RawValue::get).expect("data").to_owned();
                    let next = (seen.parse::<u64>().expect("a number") + 1).to_string();
                    let update = put(&["counter"], UpdateWhen::DataIs(Some(seen)), Keep::Set(Some(&next)), Keep::Keep);
                    match store.update(&n, update).await {
                        Ok(out) if out.applied => return,
                        Ok(_) => {}
                        Err(StoreError::Unavailable(_)) => {}
                        Err(e) => panic!("update: {e}"),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    let got = h.store.get(&n, &id(&["counter"])).await.expect("get").expect("present");
    assert_eq!(got.data.as_deref().map(RawValue::get), Some("40"), "no increment lost");
}
