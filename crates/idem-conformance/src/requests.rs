//! Conformance checks for leased keys (gateway requests, operations): one holder per key, lease
//! tokens that guard completion, release and extension (a lease that ran out stays its holder's
//! until a begin takes the key), leases and TTLs that expire exactly.

use std::sync::Arc;
use std::time::Duration;

use idem_core::request::{Begin, ENDED_LEASE_KEPT, Forget, LeaseToken, NewRequest, RequestState};
use idem_core::{Clock, RequestStore};

use crate::Harness;

const LEASE: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(24 * 3600);

fn request(key: &str, fingerprint: u8) -> NewRequest {
    NewRequest {
        id: crate::id(&["gateway", key]),
        fingerprint: [fingerprint; 32],
        lease: LEASE,
        keep: TTL,
        held: Vec::new(),
        client: None,
    }
}

/// A stored result: opaque bytes to the store.
fn response(body: &str) -> Vec<u8> {
    format!("201 {body}").into_bytes()
}

async fn start<S: RequestStore + ?Sized>(h: &Harness<S>, r: &NewRequest) -> LeaseToken {
    match h.store.begin_request(r.clone()).await.expect("begin") {
        Begin::Started { token, .. } => token,
        other => panic!("expected to start, got {other:?}"),
    }
}

pub async fn first_begin_holds_the_key_and_others_see_it_in_flight<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let r = request("k", 1);
    match h.store.begin_request(r.clone()).await.expect("begin") {
        Begin::Started { lease_until, lease_expired: false, .. } => {
            assert_eq!(lease_until, crate::START.plus(LEASE), "the holder is told the lease as stored");
        }
        other => panic!("expected to start, got {other:?}"),
    }
    match h.store.begin_request(r.clone()).await.expect("begin") {
        Begin::Held { same_fingerprint: true, lease_until } => assert_eq!(lease_until, crate::START.plus(LEASE)),
        other => panic!("expected in flight, got {other:?}"),
    }
    let different = request("k", 2);
    assert!(matches!(
        h.store.begin_request(different).await.expect("begin"),
        Begin::Held { same_fingerprint: false, .. }
    ));
    assert!(matches!(h.store.peek_request(&r.id).await.expect("peek"), Some(RequestState::Held { .. })));
}

pub async fn completed_response_is_replayed_until_its_ttl<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let r = request("k", 1);
    let token = start(h, &r).await;
    let stored = h.store.complete_request(&r.id, token, &response("{\"order\":1}"), TTL).await.expect("complete");
    assert_eq!(stored, Some(crate::START.plus(TTL)), "the expiry as stored, which every read reports");
    match h.store.begin_request(r.clone()).await.expect("begin") {
        Begin::Completed { same_fingerprint: true, result: stored, expires_at } => {
            assert_eq!(stored, response("{\"order\":1}"));
            assert_eq!(expires_at, crate::START.plus(TTL));
        }
        other => panic!("expected completed, got {other:?}"),
    }
    assert!(matches!(
        h.store.begin_request(request("k", 2)).await.expect("begin"),
        Begin::Completed { same_fingerprint: false, .. }
    ));
    assert!(
        h.store.complete_request(&r.id, token, &response("again"), TTL).await.expect("complete").is_none(),
        "completes once"
    );
    h.clock.advance(TTL);
    assert!(h.store.peek_request(&r.id).await.expect("peek").is_none(), "expired is absent");
    assert!(matches!(h.store.begin_request(r).await.expect("begin"), Begin::Started { lease_expired: false, .. }));
}

pub async fn only_the_lease_holder_completes_or_releases<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let r = request("k", 1);
    let token = start(h, &r).await;
    let stranger = LeaseToken::generate();
    assert!(h.store.complete_request(&r.id, stranger, &response("x"), TTL).await.expect("complete").is_none());
    assert!(!h.store.release_request(&r.id, stranger).await.expect("release"));
    assert!(h.store.release_request(&r.id, token).await.expect("release"));
    assert!(h.store.peek_request(&r.id).await.expect("peek").is_none(), "released is absent");
    assert!(
        h.store.complete_request(&r.id, token, &response("x"), TTL).await.expect("complete").is_none(),
        "a released lease is gone"
    );
    start(h, &r).await;
}

pub async fn an_expired_lease_frees_the_key_and_voids_the_old_token<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let r = request("k", 1);
    let old = start(h, &r).await;
    h.clock.advance(LEASE - Duration::from_millis(1));
    assert!(matches!(h.store.begin_request(r.clone()).await.expect("begin"), Begin::Held { .. }));
    h.clock.advance(Duration::from_millis(1));
    let new = match h.store.begin_request(r.clone()).await.expect("begin") {
        Begin::Started { token, lease_expired: true, .. } => token,
        other => panic!("an expired lease frees the key: {other:?}"),
    };
    assert!(
        h.store.complete_request(&r.id, old, &response("late"), TTL).await.expect("complete").is_none(),
        "the late holder cannot overwrite"
    );
    assert!(!h.store.release_request(&r.id, old).await.expect("release"), "nor release its successor's key");
    assert!(h.store.complete_request(&r.id, new, &response("fresh"), TTL).await.expect("complete").is_some());
    match h.store.peek_request(&r.id).await.expect("peek") {
        Some(RequestState::Completed { result: stored, .. }) => assert_eq!(stored, response("fresh")),
        other => panic!("expected the successor's response, got {other:?}"),
    }
}

/// A lease that ran out frees the key for the next begin, but until one takes it its holder may
/// still complete it (an answer that came back late is kept: no one ran the key again), extend it
/// or release it; once the store stopped keeping it, the token is worthless.
pub async fn a_lease_that_ran_out_is_its_holders_until_a_begin_takes_the_key<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let r = request("k", 1);
    let token = start(h, &r).await;
    h.clock.advance(LEASE);
    assert!(h.store.peek_request(&r.id).await.expect("peek").is_none(), "a lease that ran out is not live");
    let until = h.store.complete_request(&r.id, token, &response("late"), TTL).await.expect("complete");
    assert_eq!(until, Some(crate::START.plus(LEASE + TTL)), "a late answer is kept");
    match h.store.begin_request(r.clone()).await.expect("begin") {
        Begin::Completed { same_fingerprint: true, result, .. } => assert_eq!(result, response("late")),
        other => panic!("expected the late answer replayed, got {other:?}"),
    }

    let extended = request("extended", 1);
    let token = start(h, &extended).await;
    h.clock.advance(LEASE + Duration::from_secs(5));
    let until = h.store.extend_request(&extended.id, token, LEASE).await.expect("extend");
    assert_eq!(until, Some(h.clock.now().plus(LEASE)), "an ended lease no one took is extended");
    assert!(matches!(h.store.begin_request(extended).await.expect("begin"), Begin::Held { .. }), "held again");

    let released = request("released", 1);
    let token = start(h, &released).await;
    h.clock.advance(LEASE);
    assert!(h.store.release_request(&released.id, token).await.expect("release"), "released late");
    assert!(matches!(
        h.store.begin_request(released).await.expect("begin"),
        Begin::Started { lease_expired: false, .. }
    ));

    let forgotten = request("forgotten", 1);
    let token = start(h, &forgotten).await;
    h.clock.advance(LEASE + ENDED_LEASE_KEPT);
    let late = h.store.complete_request(&forgotten.id, token, &response("too late"), TTL).await.expect("complete");
    assert!(late.is_none(), "past ENDED_LEASE_KEPT the token is worthless");
    assert!(h.store.extend_request(&forgotten.id, token, LEASE).await.expect("extend").is_none());
    assert!(!h.store.release_request(&forgotten.id, token).await.expect("release"));
}

pub async fn race_of_200_begins_has_one_holder<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let store = Arc::clone(&h.store);
            tokio::spawn(async move { store.begin_request(request("contended", 7)).await })
        })
        .collect();
    let mut started = 0;
    for task in tasks {
        if matches!(task.await.expect("task").expect("begin"), Begin::Started { .. }) {
            started += 1;
        }
    }
    assert_eq!(started, 1, "exactly one of 200 concurrent begins holds the key");
}

/// The keys are begun with the TTL they are completed with as their `keep`, as the gateway and
/// the operations API do.
pub async fn sweeper_deletes_finished_requests<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let ttl = Duration::from_secs(10);
    let done = NewRequest { keep: ttl, ..request("done", 1) };
    let token = start(h, &done).await;
    let completed = h.store.complete_request(&done.id, token, &response("x"), ttl).await;
    assert!(completed.expect("complete").is_some());
    h.clock.advance(LEASE);
    start(h, &NewRequest { keep: ttl, ..request("held", 1) }).await;
    h.clock.advance(Duration::from_secs(10));
    assert_eq!(h.store.sweep_requests(100).await.expect("sweep"), 1, "only the expired record goes");
    h.clock.advance(LEASE);
    assert_eq!(h.store.sweep_requests(100).await.expect("sweep"), 0, "a ran-out lease is kept for its holder");
    h.clock.advance(ENDED_LEASE_KEPT);
    assert_eq!(h.store.sweep_requests(100).await.expect("sweep"), 1, "then it goes");
}

pub async fn extend_moves_the_lease_for_its_holder_only<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let r = request("k", 1);
    let token = start(h, &r).await;
    h.clock.advance(LEASE - Duration::from_secs(1));
    let longer = Duration::from_secs(120);
    let stranger = LeaseToken::generate();
    assert_eq!(h.store.extend_request(&r.id, stranger, longer).await.expect("extend"), None, "not its holder");
    let until = h.store.extend_request(&r.id, token, longer).await.expect("extend");
    let expected = crate::START.plus(LEASE - Duration::from_secs(1) + longer);
    assert_eq!(until, Some(expected), "the lease now ends `lease` from now");
    h.clock.advance(Duration::from_secs(60));
    assert!(
        matches!(h.store.begin_request(r.clone()).await.expect("begin"), Begin::Held { lease_until, .. } if lease_until == expected),
        "still held past the first lease's end"
    );
    assert!(h.store.complete_request(&r.id, token, &response("done"), TTL).await.expect("complete").is_some());
    assert_eq!(
        h.store.extend_request(&r.id, token, longer).await.expect("extend"),
        None,
        "a completed key has no lease"
    );
    let other = request("other", 1);
    let late = start(h, &other).await;
    h.clock.advance(LEASE);
    assert!(matches!(
        h.store.begin_request(other.clone()).await.expect("begin"),
        Begin::Started { lease_expired: true, .. }
    ));
    assert_eq!(
        h.store.extend_request(&other.id, late, longer).await.expect("extend"),
        None,
        "an ended lease another begin took is not its old holder's"
    );
}

/// An extension sent long ago (a call given up on a stalled path, applied when the path came back)
/// may arrive after a newer one: it never moves the lease's end earlier.
pub async fn an_extension_never_shortens_a_lease<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let r = request("k", 1);
    let token = start(h, &r).await;
    let full = crate::START.plus(LEASE);
    let shorter = h.store.extend_request(&r.id, token, Duration::from_secs(10)).await.expect("extend");
    assert_eq!(shorter, Some(full), "a shorter extension leaves the end where it was, and says so");
    match h.store.begin_request(r.clone()).await.expect("begin") {
        Begin::Held { lease_until, .. } => assert_eq!(lease_until, full),
        other => panic!("expected the key held until {full:?}, got {other:?}"),
    }
    h.clock.advance(Duration::from_secs(50));
    let later = h.store.extend_request(&r.id, token, Duration::from_secs(30)).await.expect("extend");
    assert_eq!(later, Some(crate::START.plus(Duration::from_secs(80))), "a longer one moves it");
}

pub async fn held_bytes_are_kept_while_held_and_forget_frees_only_results<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let r = NewRequest { held: b"ttl=90s".to_vec(), ..request("k", 1) };
    let token = start(h, &r).await;
    match h.store.peek_request(&r.id).await.expect("peek") {
        Some(RequestState::Held { held, lease_until, .. }) => {
            assert_eq!((held.as_slice(), lease_until), (&b"ttl=90s"[..], crate::START.plus(LEASE)))
        }
        other => panic!("expected in flight with its held bytes, got {other:?}"),
    }
    assert_eq!(h.store.forget_request(&r.id).await.expect("forget"), Forget::Held, "a held key stays");
    assert!(h.store.complete_request(&r.id, token, &response("done"), TTL).await.expect("complete").is_some());
    match h.store.peek_request(&r.id).await.expect("peek") {
        Some(RequestState::Completed { result, .. }) => {
            assert_eq!(result, response("done"), "the result replaced them")
        }
        other => panic!("expected completed, got {other:?}"),
    }
    assert_eq!(h.store.forget_request(&r.id).await.expect("forget"), Forget::Forgotten);
    assert!(h.store.peek_request(&r.id).await.expect("peek").is_none());
    assert_eq!(h.store.forget_request(&r.id).await.expect("forget"), Forget::Absent);
    assert!(matches!(h.store.begin_request(r).await.expect("begin"), Begin::Started { lease_expired: false, .. }));
}

/// A begin whose answer was lost (it took the key) is sent again with the same client token: it
/// gets the same lease (token, end, fence), not `Held`. Another token, or another request,
/// does not; once the lease has run out the retry takes the key afresh.
pub async fn a_begin_retried_with_its_client_token_gets_its_lease_back<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let token_of = |t: &str| Some(idem_core::ClientToken::parse(t).expect("valid token"));
    let r = NewRequest { client: token_of("begin-1"), ..request("k", 1) };
    let (token, until, fence) = match h.store.begin_request(r.clone()).await.expect("begin") {
        Begin::Started { token, lease_until, fence, .. } => (token, lease_until, fence),
        other => panic!("expected to start, got {other:?}"),
    };
    h.clock.advance(Duration::from_secs(1));
    match h.store.begin_request(r.clone()).await.expect("begin") {
        Begin::Started { token: again, lease_until, fence: same, lease_expired: false } => {
            assert_eq!((again, lease_until, same), (token, until, fence), "the same lease, unchanged");
        }
        other => panic!("the retry gets its lease back, got {other:?}"),
    }
    let other = NewRequest { client: token_of("begin-2"), ..request("k", 1) };
    assert!(matches!(h.store.begin_request(other).await.expect("begin"), Begin::Held { .. }));
    let changed = NewRequest { client: token_of("begin-1"), ..request("k", 2) };
    assert!(matches!(
        h.store.begin_request(changed).await.expect("begin"),
        Begin::Held { same_fingerprint: false, .. }
    ));
    assert!(
        h.store.complete_request(&r.id, token, &response("done"), TTL).await.expect("the lease still holds").is_some()
    );
    assert!(matches!(h.store.begin_request(r.clone()).await.expect("begin"), Begin::Completed { .. }));

    let late = NewRequest { client: token_of("begin-3"), ..request("late", 1) };
    let first = start(h, &late).await;
    h.clock.advance(LEASE);
    match h.store.begin_request(late).await.expect("begin") {
        Begin::Started { token, lease_expired: true, .. } => assert_ne!(token, first, "a new lease"),
        other => panic!("an ended lease is taken afresh, got {other:?}"),
    }
}

/// Every take of a key gets a fencing number greater than the previous holder's: after a lease
/// runs out, after a release, and after a result is forgotten or swept.
pub async fn fences_grow_with_each_take_of_a_key<S: RequestStore + ?Sized>(h: &Harness<S>) {
    let r = request("fenced", 1);
    let take = |h: &Harness<S>| {
        let store = Arc::clone(&h.store);
        let r = r.clone();
        async move {
            match store.begin_request(r).await.expect("begin") {
                Begin::Started { token, fence, .. } => (token, fence),
                other => panic!("expected to start, got {other:?}"),
            }
        }
    };
    let (_, first) = take(h).await;
    h.clock.advance(LEASE);
    let (token, second) = take(h).await;
    assert!(second > first, "taken over after its lease: {second} > {first}");
    assert!(h.store.release_request(&r.id, token).await.expect("release"));
    let (token, third) = take(h).await;
    assert!(third > second, "taken after a release: {third} > {second}");
    assert!(
        h.store
            .complete_request(&r.id, token, &response("x"), Duration::from_secs(1))
            .await
            .expect("complete")
            .is_some()
    );
    h.clock.advance(Duration::from_secs(1));
    h.store.sweep_requests(100).await.expect("sweep");
    let (_, fourth) = take(h).await;
    assert!(fourth > third, "taken after its result was swept: {fourth} > {third}");
    let (_, other) = match h.store.begin_request(request("another key", 1)).await.expect("begin") {
        Begin::Started { token, fence, .. } => (token, fence),
        o => panic!("{o:?}"),
    };
    assert!(other > 0, "every take has a fence");
}
