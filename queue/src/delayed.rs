//! Keys waiting for a moment in the future before they are added to the queue.

use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeMap;
use std::hash::Hash;

use crate::time::Instant;

/// Keys scheduled for a later add, each at most once, ordered by due time then by scheduling
/// order (so equal due times fire first-come first-served, deterministically).
#[derive(Debug, Clone)]
pub(crate) struct DelayedKeys<K> {
    by_due: BTreeMap<(Instant, u64), K>,
    due_of: HashMap<K, (Instant, u64)>,
    seq: u64,
}

impl<K: Eq + Hash + Clone> DelayedKeys<K> {
    pub(crate) fn new() -> Self {
        DelayedKeys {
            by_due: BTreeMap::new(),
            due_of: HashMap::new(),
            seq: 0,
        }
    }

    /// Schedules `key` at `due`. A key already scheduled keeps the earlier of the two times: a
    /// second request to look at it "in an hour" must not postpone a retry due in a second.
    /// Returns whether the schedule changed.
    pub(crate) fn schedule(&mut self, key: K, due: Instant) -> bool {
        if let Some(&(existing, seq)) = self.due_of.get(&key) {
            if existing <= due {
                return false;
            }
            self.by_due.remove(&(existing, seq));
        }
        self.seq += 1;
        let slot = (due, self.seq);
        self.due_of.insert(key.clone(), slot);
        self.by_due.insert(slot, key);
        true
    }

    /// Removes and returns the earliest key due at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<K> {
        let (&(due, _), _) = self.by_due.first_key_value()?;
        if due > now {
            return None;
        }
        let (_, key) = self.by_due.pop_first()?;
        self.due_of.remove(&key);
        Some(key)
    }

    /// When the earliest key is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.by_due.first_key_value().map(|(&(due, _), _)| due)
    }

    /// When `key` is due, if scheduled.
    pub(crate) fn due_of(&self, key: &K) -> Option<Instant> {
        self.due_of.get(key).map(|&(due, _)| due)
    }

    pub(crate) fn clear(&mut self) {
        self.by_due.clear();
        self.due_of.clear();
    }
}

impl<K> DelayedKeys<K> {
    pub(crate) fn len(&self) -> usize {
        self.due_of.len()
    }
}
