//! A container's cgroup limits and OOM score, from its resources as the kubelet derives them.
//!
//! A launcher pod carries the memory KubeVirt computed (guest memory plus overhead) and its CPU
//! as requests and, when the VMI or the namespace sets them, limits. A node that ignores them
//! lets one VM's QEMU take the memory and CPU its neighbours were promised, and makes the OOM
//! killer choose among pods without the order Kubernetes gives them. So, as the kubelet with
//! containerd does:
//! - `limits.memory` → the cgroup's memory limit (bytes);
//! - `requests.cpu` → CPU shares, `milliCPU × 1024 / 1000`, at least 2 (runc maps shares onto
//!   cgroup v2's `cpu.weight`); `limits.cpu` → a CFS quota of `milliCPU × 100` µs per 100 ms
//!   period (at least 1 ms);
//! - the pod's QoS class → `oom_score_adj`: Guaranteed −997, BestEffort 1000, Burstable
//!   `1000 − 1000 × memory request / node memory`, kept within 3..=999 — the last needs the
//!   node's memory, which the plan is handed ([`crate::KubeletConfig::memory_capacity`]); without
//!   it a Burstable container keeps the score it inherits.
//!
//! A runner that may not lower OOM scores (no `CAP_SYS_RESOURCE`, as in some sandboxes) keeps
//! a score at its own ([`crate::KubeletConfig::oom_score_floor`]): runc would otherwise fail
//! the container. Requests default to limits where only limits are set, as the API server
//! defaults them.
//! Pure: quantities in, numbers out.

use k8s_openapi::api::core::v1::{Container, Pod};
use kvrs_api::quantity::Quantity;

use crate::error::PlanError;

/// The CFS period the kubelet uses (100 ms, in µs).
pub const CPU_PERIOD_US: u64 = 100_000;

/// What a container's cgroup and process get from its resources.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ContainerLimits {
    /// `linux.resources.memory.limit` in bytes (`limits.memory`).
    pub memory_bytes: Option<i64>,
    /// `linux.resources.cpu.shares` (`requests.cpu`).
    pub cpu_shares: Option<u64>,
    /// `linux.resources.cpu.quota` in µs per [`CPU_PERIOD_US`] (`limits.cpu`).
    pub cpu_quota_us: Option<i64>,
    /// `process.oomScoreAdj` from the pod's QoS class.
    pub oom_score_adj: Option<i32>,
}

/// A pod's quality-of-service class, as the kubelet computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    /// Every container has CPU and memory limits equal to its requests.
    Guaranteed,
    /// Something is requested or limited, but not Guaranteed.
    Burstable,
    /// No container requests or limits CPU or memory.
    BestEffort,
}

/// The OOM score of a Guaranteed pod's containers.
const GUARANTEED_OOM_SCORE_ADJ: i32 = -997;
/// The OOM score of a BestEffort pod's containers.
const BEST_EFFORT_OOM_SCORE_ADJ: i32 = 1000;

/// A quantity from the container's requests or limits, `None` when not set.
fn quantity(
    container: &Container,
    which: &str,
    resource: &str,
) -> Result<Option<Quantity>, PlanError> {
    let resources = container.resources.as_ref();
    let map = match which {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        _ => resources.and_then(|r| r.requests.as_ref()),
    };
    let Some(q) = map.and_then(|m| m.get(resource)) else {
        return Ok(None);
    };
    let parsed = Quantity::new(q.0.clone());
    // Parse now, so a bad quantity is an error naming the field rather than a silent default.
    parsed.milli_value().map_err(|_| PlanError::Invalid {
        field: format!("container {}: resources.{which}.{resource}", container.name),
        value: q.0.clone(),
        reason: "not a Kubernetes quantity",
    })?;
    Ok(Some(parsed))
}

fn milli(q: &Quantity) -> i64 {
    q.milli_value().unwrap_or(0)
}

fn bytes(q: &Quantity) -> i64 {
    q.value().unwrap_or(0)
}

/// The request of `resource`, or its limit when only that is set (the API server's default).
fn request(container: &Container, resource: &str) -> Result<Option<Quantity>, PlanError> {
    Ok(match quantity(container, "requests", resource)? {
        Some(q) => Some(q),
        None => quantity(container, "limits", resource)?,
    })
}

/// The pod's QoS class over its regular and init containers.
pub fn qos_class(pod: &Pod) -> Result<QosClass, PlanError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(QosClass::BestEffort);
    };
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let (mut any, mut guaranteed) = (false, true);
    for c in containers {
        for resource in ["cpu", "memory"] {
            let (req, lim) = (request(c, resource)?, quantity(c, "limits", resource)?);
            if req.as_ref().is_some_and(|q| milli(q) != 0) || lim.is_some() {
                any = true;
            }
            match (&req, &lim) {
                (Some(r), Some(l)) if milli(r) == milli(l) => {}
                _ => guaranteed = false,
            }
        }
    }
    Ok(match (any, guaranteed) {
        (false, _) => QosClass::BestEffort,
        (true, true) => QosClass::Guaranteed,
        (true, false) => QosClass::Burstable,
    })
}

/// The limits of `container` in a pod of class `qos` on a node of `memory_capacity` bytes.
pub fn container_limits(
    container: &Container,
    qos: QosClass,
    memory_capacity: Option<u64>,
    oom_score_floor: Option<i32>,
) -> Result<ContainerLimits, PlanError> {
    let memory_bytes = quantity(container, "limits", "memory")?.map(|q| bytes(&q));
    let cpu_shares = request(container, "cpu")?.map(|q| {
        let shares = u64::try_from(milli(&q)).unwrap_or(0).saturating_mul(1024) / 1000;
        shares.max(2)
    });
    let cpu_quota_us = quantity(container, "limits", "cpu")?.map(|q| {
        let quota = milli(&q).saturating_mul(i64::try_from(CPU_PERIOD_US).unwrap_or(0)) / 1000;
        quota.max(1000)
    });
    let oom_score_adj = match qos {
        QosClass::Guaranteed => Some(GUARANTEED_OOM_SCORE_ADJ),
        QosClass::BestEffort => Some(BEST_EFFORT_OOM_SCORE_ADJ),
        QosClass::Burstable => memory_capacity.filter(|c| *c > 0).map(|capacity| {
            let requested = request(container, "memory")
                .ok()
                .flatten()
                .map_or(0, |q| u64::try_from(bytes(&q)).unwrap_or(0));
            burstable_oom_score_adj(requested, capacity)
        }),
    };
    let oom_score_adj = oom_score_adj.map(|s| oom_score_floor.map_or(s, |floor| s.max(floor)));
    Ok(ContainerLimits {
        memory_bytes,
        cpu_shares,
        cpu_quota_us,
        oom_score_adj,
    })
}

/// `1000 − 1000 × requested / capacity`, at least 3 (above any Guaranteed container) and at
/// most 999 (below a BestEffort one).
pub fn burstable_oom_score_adj(requested: u64, capacity: u64) -> i32 {
    let share = u128::from(requested) * 1000 / u128::from(capacity.max(1));
    let score = 1000_i128 - i128::try_from(share).unwrap_or(i128::MAX);
    let low = i128::from(1000 + GUARANTEED_OOM_SCORE_ADJ);
    let high = i128::from(BEST_EFFORT_OOM_SCORE_ADJ - 1);
    i32::try_from(score.clamp(low, high)).unwrap_or(999)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": containers}}),
        )
        .expect("pod")
    }

    fn container(resources: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "compute", "resources": resources}))
            .expect("container")
    }

    #[test]
    fn the_qos_class_follows_requests_and_limits() {
        assert_eq!(
            qos_class(&pod(json!([{"name": "a"}]))).unwrap(),
            QosClass::BestEffort
        );
        let equal = json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": equal}]))).unwrap(),
            QosClass::Guaranteed
        );
        let limits_only = json!({"limits": {"cpu": "100m", "memory": "90Mi"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": limits_only}]))).unwrap(),
            QosClass::Guaranteed,
            "requests default to limits"
        );
        let requests = json!({"requests": {"cpu": "100m", "memory": "458Mi"}});
        assert_eq!(
            qos_class(&pod(
                json!([{"name": "a", "resources": requests}, {"name": "b"}])
            ))
            .unwrap(),
            QosClass::Burstable
        );
    }

    #[test]
    fn limits_become_cgroup_numbers_as_the_kubelet_writes_them() {
        let c = container(
            json!({"requests": {"cpu": "100m", "memory": "458Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
        );
        let l = container_limits(&c, QosClass::Burstable, Some(8 << 30), None).unwrap();
        assert_eq!(l.memory_bytes, Some(1 << 30));
        assert_eq!(l.cpu_shares, Some(102));
        assert_eq!(l.cpu_quota_us, Some(200_000));
        // 1000 − 1000 × 458 MiB / 8 GiB = 1000 − 55 = 945.
        assert_eq!(l.oom_score_adj, Some(945));
        let tiny = container(json!({"requests": {"cpu": "1m"}, "limits": {"cpu": "1m"}}));
        let l = container_limits(&tiny, QosClass::Burstable, None, None).unwrap();
        assert_eq!(
            (l.cpu_shares, l.cpu_quota_us, l.oom_score_adj),
            (Some(2), Some(1000), None)
        );
        let none = container(json!({}));
        assert_eq!(
            container_limits(&none, QosClass::BestEffort, None, None).unwrap(),
            ContainerLimits {
                oom_score_adj: Some(1000),
                ..ContainerLimits::default()
            }
        );
    }

    #[test]
    fn a_runner_that_may_not_lower_scores_keeps_them_at_its_own() {
        let c = container(json!({"limits": {"cpu": "1", "memory": "1Gi"}}));
        let l = container_limits(&c, QosClass::Guaranteed, None, Some(0)).unwrap();
        assert_eq!(l.oom_score_adj, Some(0));
        let l = container_limits(&c, QosClass::BestEffort, None, Some(0)).unwrap();
        assert_eq!(l.oom_score_adj, Some(1000), "raising is always allowed");
    }

    #[test]
    fn a_bad_quantity_is_an_error_naming_the_field() {
        let c = container(json!({"limits": {"memory": "lots"}}));
        let e = container_limits(&c, QosClass::Burstable, None, None).unwrap_err();
        assert!(e.to_string().contains("resources.limits.memory"), "{e}");
    }

    proptest! {
        #[test]
        fn a_burstable_score_stays_between_guaranteed_and_best_effort(
            requested in 0u64..=u64::MAX, capacity in 0u64..=u64::MAX,
        ) {
            let s = burstable_oom_score_adj(requested, capacity);
            prop_assert!((3..=999).contains(&s), "{s}");
        }

        #[test]
        fn more_memory_requested_never_raises_the_score(
            a in 0u64..(1 << 40), b in 0u64..(1 << 40), capacity in 1u64..(1 << 40),
        ) {
            let (small, large) = (a.min(b), a.max(b));
            prop_assert!(burstable_oom_score_adj(large, capacity) <= burstable_oom_score_adj(small, capacity));
        }
    }
}
