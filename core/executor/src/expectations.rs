//! A controller's expectations: what it wrote that its caches have not shown yet.
//!
//! KubeVirt's VM and VMI controllers keep two stores per controller: creations/deletions under
//! the controller key (a VMI created for a VM, a pod deleted for a VMI) and the controller's own
//! updates of an object it must see back before acting on it again. A plan names the expectation
//! of each write ([`Expectation`]); this type raises it before the write and lowers it when the
//! write fails, so the next reconcile does not wait for something that never happens.

use kvrs_decide::Expectation;
use kvrs_decide::PendingExpectations;
use kvrs_queue::{Expectations, Instant};

/// The two expectation stores of one controller.
#[derive(Debug, Default)]
pub struct ControllerExpectations {
    /// Creations and deletions under each controller key.
    pub objects: Expectations<String>,
    /// Own updates not yet observed, by object key.
    pub updates: Expectations<String>,
    /// Own launcher-pod updates not yet observed, by the key of the pod's VMI.
    pub pod_updates: Expectations<String>,
}

impl ControllerExpectations {
    /// Empty stores.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises `e` before its write is sent.
    pub fn raise(&mut self, e: &Expectation, now: Instant) {
        match e {
            Expectation::ObservedUpdate { key } => {
                self.updates.expect_creations(key.clone(), 1, now)
            }
            Expectation::ObservedPodUpdate { vmi_key } => {
                self.pod_updates.expect_creations(vmi_key.clone(), 1, now)
            }
            Expectation::Creations { key, count } => {
                if self.objects.pending(key).is_some() {
                    self.objects.raise(key, i64::from(*count), 0);
                } else {
                    self.objects.expect_creations(key.clone(), *count, now);
                }
            }
            Expectation::Deletions { key, objects } => {
                for o in objects {
                    self.objects
                        .add_expected_deletion(key.clone(), o.clone(), now);
                }
            }
        }
    }

    /// Undoes `e` after its write failed.
    pub fn lower(&mut self, e: &Expectation) {
        match e {
            Expectation::ObservedUpdate { key } => self.updates.lower(key, 1, 0),
            Expectation::ObservedPodUpdate { vmi_key } => self.pod_updates.lower(vmi_key, 1, 0),
            Expectation::Creations { key, count } => self.objects.lower(key, i64::from(*count), 0),
            Expectation::Deletions { key, objects } => {
                for o in objects {
                    self.objects.deletion_observed(key, o);
                }
            }
        }
    }

    /// What is still outstanding for `key`, as the decisions read it (expired expectations
    /// count as satisfied, as in KubeVirt, so a lost event cannot block a key forever).
    pub fn pending(&self, key: &str, now: Instant) -> PendingExpectations {
        let count = |e: &Expectations<String>| {
            let k = key.to_string();
            if e.satisfied(&k, now) {
                (0, 0)
            } else {
                let p = e.pending(&k);
                (
                    p.map_or(0, |p| clamp(p.creations)),
                    p.map_or(0, |p| clamp(p.deletions)),
                )
            }
        };
        let (creations, deletions) = count(&self.objects);
        let (updates, _) = count(&self.updates);
        let (pod_updates, _) = count(&self.pod_updates);
        PendingExpectations {
            creations: creations
                .saturating_add(updates)
                .saturating_add(pod_updates),
            deletions,
        }
    }

    /// Forgets everything about `key` (its object is gone).
    pub fn forget(&mut self, key: &str) {
        let k = key.to_string();
        self.objects.delete_expectations(&k);
        self.updates.delete_expectations(&k);
        self.pod_updates.delete_expectations(&k);
    }
}

/// An outstanding count as the decisions take it: never negative, saturating at `u32::MAX`.
fn clamp(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_create_leaves_nothing_pending() {
        let now = Instant::ZERO;
        let mut exp = ControllerExpectations::new();
        let e = Expectation::Creations {
            key: "ns/vm".into(),
            count: 1,
        };
        exp.raise(&e, now);
        assert_eq!(exp.pending("ns/vm", now).creations, 1);
        exp.lower(&e);
        assert!(exp.pending("ns/vm", now).satisfied());
    }

    #[test]
    fn own_updates_count_as_pending_creations() {
        let now = Instant::ZERO;
        let mut exp = ControllerExpectations::new();
        exp.raise(
            &Expectation::ObservedUpdate {
                key: "ns/vmi".into(),
            },
            now,
        );
        assert_eq!(exp.pending("ns/vmi", now).creations, 1);
        exp.updates.creation_observed(&"ns/vmi".to_string());
        assert!(exp.pending("ns/vmi", now).satisfied());
    }
}
