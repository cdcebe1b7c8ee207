//! Controller expectations: "I just created/deleted these; my cache has not seen it yet".
//!
//! A controller writes to the API server and then reads its own informer cache, which lags
//! behind. Without bookkeeping the next sync of the same key would see no pod yet and create a
//! second one. So before acting a controller records what it expects to observe, the event
//! handlers lower the counts as watch events arrive, and a sync only acts once
//! [`Expectations::satisfied`] says the cache has caught up. Records expire after a timeout (5
//! minutes, as in KubeVirt) so that a lost watch event cannot block a key forever; expiry is
//! judged against an injected `now`.
//!
//! Deletions are tracked by the identity of the deleted object (KubeVirt tracks pod keys or
//! UIDs) because one deletion can be observed twice: first as an update setting
//! `deletionTimestamp`, then as the delete event. Counting by identity makes the second sighting
//! a no-op.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use crate::time::Instant;

/// KubeVirt's expectations timeout.
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Outstanding expectations of one controller key.
#[derive(Debug, Clone)]
pub struct Pending<U> {
    /// Creations not yet observed (may go negative when more were seen than expected).
    pub creations: i64,
    /// Deletions not yet observed.
    pub deletions: i64,
    /// Identities whose deletion is still awaited.
    pub deleting: HashSet<U>,
    /// When the expectations were set; they expire a timeout later.
    pub set_at: Instant,
}

impl<U> Pending<U> {
    /// Everything expected has been observed.
    pub fn fulfilled(&self) -> bool {
        self.creations <= 0 && self.deletions <= 0
    }
}

/// Expectations of every controller key (`K`, e.g. a VMI's `namespace/name`), with deletions
/// tracked by controllee identity (`U`, e.g. a pod UID or key).
#[derive(Debug, Clone)]
pub struct Expectations<K, U = String> {
    records: HashMap<K, Pending<U>>,
    timeout: Duration,
}

impl<K: Eq + Hash + Clone + Debug, U: Eq + Hash + Clone + Debug> Default for Expectations<K, U> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Eq + Hash + Clone + Debug, U: Eq + Hash + Clone + Debug> Expectations<K, U> {
    /// No expectations, KubeVirt's 5 minute timeout.
    pub fn new() -> Self {
        Self::with_timeout(EXPECTATIONS_TIMEOUT)
    }

    /// No expectations, a custom timeout.
    pub fn with_timeout(timeout: Duration) -> Self {
        Expectations {
            records: HashMap::new(),
            timeout,
        }
    }

    /// Expects `n` creations for `key`, replacing whatever was expected before (the controller
    /// recomputes the whole decision each sync, so the newest expectation is the whole truth).
    pub fn expect_creations(&mut self, key: K, n: u32, now: Instant) {
        self.set(key, i64::from(n), 0, HashSet::new(), now);
    }

    /// Expects the deletion of exactly these controllees, replacing earlier expectations.
    pub fn expect_deletions(&mut self, key: K, uids: impl IntoIterator<Item = U>, now: Instant) {
        let deleting: HashSet<U> = uids.into_iter().collect();
        if let Some(old) = self.records.get(&key)
            && !old.deleting.is_empty()
        {
            tracing::warn!(?key, awaited = ?old.deleting, "replacing deletion expectations still awaited");
        }
        let n = i64::try_from(deleting.len()).unwrap_or(i64::MAX);
        self.set(key, 0, n, deleting, now);
    }

    /// Adds one more awaited deletion to `key`'s current set and restarts its timeout.
    pub fn add_expected_deletion(&mut self, key: K, uid: U, now: Instant) {
        let mut deleting = self
            .records
            .remove(&key)
            .map(|p| p.deleting)
            .unwrap_or_default();
        deleting.insert(uid);
        let n = i64::try_from(deleting.len()).unwrap_or(i64::MAX);
        self.set(key, 0, n, deleting, now);
    }

    /// Raises the counts of existing expectations (no-op when `key` has none).
    pub fn raise(&mut self, key: &K, creations: i64, deletions: i64) {
        if let Some(p) = self.records.get_mut(key) {
            p.creations = p.creations.saturating_add(creations);
            p.deletions = p.deletions.saturating_add(deletions);
        }
    }

    /// Lowers the counts of existing expectations (no-op when `key` has none).
    pub fn lower(&mut self, key: &K, creations: i64, deletions: i64) {
        self.raise(key, creations.saturating_neg(), deletions.saturating_neg());
    }

    /// A creation by `key`'s controller was seen in the cache.
    pub fn creation_observed(&mut self, key: &K) {
        self.lower(key, 1, 0);
    }

    /// The deletion of `uid` was seen. Counts once per awaited identity: a second sighting of the
    /// same deletion, or a deletion nobody waited for, changes nothing.
    pub fn deletion_observed(&mut self, key: &K, uid: &U) {
        if let Some(p) = self.records.get_mut(key)
            && p.deleting.remove(uid)
        {
            p.deletions = p.deletions.saturating_sub(1);
        }
    }

    /// Whether `key`'s controller may act at `now`: true when it has no expectations, when
    /// everything expected was observed, or when the expectations are older than the timeout.
    pub fn satisfied(&self, key: &K, now: Instant) -> bool {
        match self.records.get(key) {
            None => true,
            Some(p) if p.fulfilled() => true,
            Some(p) if self.expired(p, now) => {
                tracing::debug!(?key, pending = ?p, "expectations expired, letting the controller act");
                true
            }
            Some(_) => false,
        }
    }

    /// Whether `key`'s expectations exist and are older than the timeout at `now`.
    pub fn is_expired(&self, key: &K, now: Instant) -> bool {
        self.records.get(key).is_some_and(|p| self.expired(p, now))
    }

    /// The outstanding expectations of `key`.
    pub fn pending(&self, key: &K) -> Option<&Pending<U>> {
        self.records.get(key)
    }

    /// Sum of creations still awaited over all keys (KubeVirt uses it to throttle bursts).
    pub fn all_pending_creations(&self) -> i64 {
        self.records
            .values()
            .map(|p| p.creations)
            .fold(0i64, i64::saturating_add)
    }

    /// Forgets `key`'s expectations (its object is gone).
    pub fn delete_expectations(&mut self, key: &K) {
        self.records.remove(key);
    }

    /// Drops every expired record to bound memory; returns how many went. Harmless: an expired
    /// record already counts as satisfied.
    pub fn purge_expired(&mut self, now: Instant) -> usize {
        let before = self.records.len();
        let timeout = self.timeout;
        self.records.retain(|_, p| now - p.set_at <= timeout);
        before - self.records.len()
    }

    /// Number of keys with expectations.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// No key has expectations.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn expired(&self, p: &Pending<U>, now: Instant) -> bool {
        now - p.set_at > self.timeout
    }

    fn set(&mut self, key: K, creations: i64, deletions: i64, deleting: HashSet<U>, now: Instant) {
        self.records.insert(
            key,
            Pending {
                creations,
                deletions,
                deleting,
                set_at: now,
            },
        );
    }
}
