//! Controller expectations on an injected clock.

use std::time::Duration;

use kvrs_queue::{EXPECTATIONS_TIMEOUT, Expectations, Instant};

const T0: Instant = Instant::ZERO;
const S: Duration = Duration::from_secs(1);

fn k(s: &str) -> String {
    s.to_string()
}

#[test]
fn a_key_without_expectations_may_act() {
    let e: Expectations<String> = Expectations::new();
    assert!(e.satisfied(&k("ns/vm"), T0));
    assert!(e.is_empty());
}

#[test]
fn creations_block_until_every_one_is_observed() {
    let mut e: Expectations<String> = Expectations::new();
    e.expect_creations(k("ns/vm"), 2, T0);
    assert!(!e.satisfied(&k("ns/vm"), T0));
    assert!(e.satisfied(&k("ns/other"), T0));
    e.creation_observed(&k("ns/vm"));
    assert!(!e.satisfied(&k("ns/vm"), T0 + S));
    assert_eq!(e.all_pending_creations(), 1);
    e.creation_observed(&k("ns/vm"));
    assert!(e.satisfied(&k("ns/vm"), T0 + S));
    // An extra sighting goes negative and stays satisfied.
    e.creation_observed(&k("ns/vm"));
    assert_eq!(e.pending(&k("ns/vm")).unwrap().creations, -1);
    assert!(e.satisfied(&k("ns/vm"), T0 + S));
    // Observations for a key with no record are ignored, not recorded as debt.
    e.creation_observed(&k("ns/unknown"));
    assert!(e.pending(&k("ns/unknown")).is_none());
}

#[test]
fn deletions_count_once_per_awaited_identity() {
    let mut e: Expectations<String> = Expectations::new();
    e.expect_deletions(k("ns/vmi"), [k("pod-uid-1"), k("pod-uid-2")], T0);
    assert_eq!(e.pending(&k("ns/vmi")).unwrap().deletions, 2);
    // Seen first as an update with deletionTimestamp, then as the delete event: counts once.
    e.deletion_observed(&k("ns/vmi"), &k("pod-uid-1"));
    e.deletion_observed(&k("ns/vmi"), &k("pod-uid-1"));
    // A deletion nobody waited for changes nothing.
    e.deletion_observed(&k("ns/vmi"), &k("pod-uid-9"));
    assert!(!e.satisfied(&k("ns/vmi"), T0));
    assert_eq!(e.pending(&k("ns/vmi")).unwrap().deletions, 1);
    e.deletion_observed(&k("ns/vmi"), &k("pod-uid-2"));
    assert!(e.satisfied(&k("ns/vmi"), T0));
    assert!(e.pending(&k("ns/vmi")).unwrap().deleting.is_empty());
}

#[test]
fn new_expectations_replace_old_ones_and_restart_the_clock() {
    let mut e: Expectations<String> = Expectations::new();
    e.expect_creations(k("a"), 1, T0);
    e.expect_deletions(k("a"), [k("u1")], T0 + S * 10);
    let p = e.pending(&k("a")).unwrap();
    assert_eq!((p.creations, p.deletions, p.set_at), (0, 1, T0 + S * 10));
    e.add_expected_deletion(k("a"), k("u2"), T0 + S * 20);
    let p = e.pending(&k("a")).unwrap();
    assert_eq!(
        (p.deletions, p.deleting.len(), p.set_at),
        (2, 2, T0 + S * 20)
    );
    e.expect_creations(k("a"), 3, T0 + S * 30);
    let p = e.pending(&k("a")).unwrap();
    assert_eq!((p.creations, p.deletions), (3, 0));
    e.raise(&k("a"), 1, 1);
    e.lower(&k("a"), 4, 0);
    let p = e.pending(&k("a")).unwrap();
    assert_eq!((p.creations, p.deletions), (0, 1));
}

#[test]
fn expectations_expire_after_five_minutes_so_a_lost_event_cannot_block_forever() {
    assert_eq!(EXPECTATIONS_TIMEOUT, Duration::from_secs(300));
    let mut e: Expectations<String> = Expectations::new();
    let set = T0 + S * 42;
    e.expect_creations(k("ns/vm"), 1, set);
    // Exactly at the timeout it still holds (expiry is strictly after).
    assert!(!e.satisfied(&k("ns/vm"), set + EXPECTATIONS_TIMEOUT));
    assert!(!e.is_expired(&k("ns/vm"), set + EXPECTATIONS_TIMEOUT));
    let past = set + EXPECTATIONS_TIMEOUT + Duration::from_nanos(1);
    assert!(e.satisfied(&k("ns/vm"), past));
    assert!(e.is_expired(&k("ns/vm"), past));
    // Setting new expectations restarts the clock.
    e.expect_creations(k("ns/vm"), 1, past);
    assert!(!e.satisfied(&k("ns/vm"), past + S));
    // Custom timeout and purge.
    let mut short: Expectations<String> = Expectations::with_timeout(S);
    short.expect_creations(k("x"), 1, T0);
    short.expect_creations(k("y"), 1, T0 + S);
    assert_eq!(short.purge_expired(T0 + S * 2 - Duration::from_nanos(1)), 1);
    assert!(short.pending(&k("x")).is_none());
    assert!(short.pending(&k("y")).is_some());
}

#[test]
fn delete_expectations_forgets_the_key() {
    let mut e: Expectations<String> = Expectations::new();
    e.expect_deletions(k("ns/vmi"), [k("u")], T0);
    e.delete_expectations(&k("ns/vmi"));
    assert!(e.satisfied(&k("ns/vmi"), T0));
    assert!(e.pending(&k("ns/vmi")).is_none());
    // A late deletion event for the forgotten key is harmless.
    e.deletion_observed(&k("ns/vmi"), &k("u"));
    assert!(e.is_empty());
}
