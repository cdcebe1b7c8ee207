//! The instancetype and preference webhooks (KubeVirt's `InstancetypeAdmitter`,
//! `PreferenceAdmitter` and their cluster-wide twins): on CREATE and UPDATE, an instancetype's
//! memory overcommit must be 0–100 and not combined with hugepages (a `launchSecurity` draws a
//! deprecation warning); a preference's CPU topology must be one KubeVirt knows, and a spread
//! must be across a supported pair with a ratio of 2 for cores and threads (a deprecated
//! `prefer*` topology draws a warning).

use kvrs_instancetype::topology::{Across, Topology, preferred_topology, spread_options};
use kvrs_instancetype::types::{InstancetypeSpec, PreferenceSpec};
use serde::Deserialize;

use crate::response::{cause, denied, read_object};
use crate::review::{AdmissionRequest, Operation, StatusCause, Verdict};

#[derive(Deserialize)]
struct Object<T> {
    #[serde(default)]
    spec: T,
}

fn read<T: Default + for<'de> Deserialize<'de>>(req: &AdmissionRequest) -> Result<T, Verdict> {
    read_object::<Object<T>>("object", req.object.as_ref()).map(|o| o.spec)
}

fn is_admitted(req: &AdmissionRequest) -> bool {
    matches!(req.operation, Operation::Create | Operation::Update)
}

pub(super) fn validate_instancetype(req: &AdmissionRequest) -> Verdict {
    if !is_admitted(req) {
        return Verdict::allow();
    }
    let spec: InstancetypeSpec = match read(req) {
        Ok(s) => s,
        Err(v) => return v,
    };
    let field = "spec.memory.overcommitPercent";
    let percent = spec.memory.overcommit_percent;
    let mut causes: Vec<StatusCause> = Vec::new();
    if !(0..=100).contains(&percent) {
        causes.push(cause(
            "FieldValueInvalid",
            format!("{field} '{percent}': must be in range between 0 and 100."),
            field,
        ));
    }
    if percent != 0 && spec.memory.hugepages.is_some() {
        causes.push(cause(
            "FieldValueInvalid",
            format!("{field} and spec.memory.hugepages should not be requested together."),
            field,
        ));
    }
    let mut verdict = denied(causes);
    if verdict.allowed && spec.launch_security.is_some() {
        verdict.warnings.push(
            "launchSecurity is deprecated and will be removed in a future release. Use preference instead."
                .into(),
        );
    }
    verdict
}

pub(super) fn validate_preference(req: &AdmissionRequest) -> Verdict {
    if !is_admitted(req) {
        return Verdict::allow();
    }
    let spec: PreferenceSpec = match read(req) {
        Ok(s) => s,
        Err(v) => return v,
    };
    let named = spec
        .cpu
        .as_ref()
        .and_then(|c| c.preferred_cpu_topology.clone());
    let Some(named) = named else {
        return Verdict::allow();
    };
    let topology = preferred_topology(Some(&spec));
    if topology == Topology::Unknown {
        return denied(vec![cause(
            "FieldValueInvalid",
            format!("unknown preferredCPUTopology {named}"),
            "spec.cpu.preferredCPUTopology",
        )]);
    }
    if topology == Topology::Spread {
        let (ratio, across) = spread_options(&spec);
        if let Across::Unknown(across) = &across {
            return denied(vec![cause(
                "FieldValueInvalid",
                format!("across {across} is not supported"),
                "spec.cpu.spreadOptions.across",
            )]);
        }
        if across == Across::CoresThreads && ratio != 2 {
            return denied(vec![cause(
                "FieldValueInvalid",
                "only a ratio of 2 (1 core 2 threads) is allowed when spreading vCPUs over cores and threads",
                "spec.cpu.spreadOptions.ratio",
            )]);
        }
    }
    let mut verdict = Verdict::allow();
    if let Some(current) = named.strip_prefix("prefer") {
        verdict.warnings.push(format!(
            "PreferredCPUTopology {named} is deprecated for removal in a future release, please use {} instead",
            current.to_ascii_lowercase()
        ));
    }
    verdict
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::Webhook;
    use super::super::testing::Req;

    fn instancetype(memory: serde_json::Value) -> Req {
        Req::instancetype(
            "virtualmachineinstancetypes",
            json!({"metadata": {"name": "it", "namespace": "default"},
                "spec": {"cpu": {"guest": 1}, "memory": memory}}),
        )
    }

    fn preference(cpu: serde_json::Value) -> Req {
        Req::instancetype(
            "virtualmachinepreferences",
            json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {"cpu": cpu}}),
        )
    }

    #[test]
    fn overcommit_is_a_percentage_without_hugepages() {
        let send = |m| instancetype(m).send(Webhook::InstancetypeValidate);
        assert!(send(json!({"guest": "1Gi", "overcommitPercent": 20})).allowed);
        assert_eq!(
            send(json!({"guest": "1Gi", "overcommitPercent": 101})).message(),
            "spec.memory.overcommitPercent '101': must be in range between 0 and 100."
        );
        assert_eq!(
            send(json!({"guest": "1Gi", "overcommitPercent": 5, "hugepages": {"pageSize": "2Mi"}}))
                .message(),
            "spec.memory.overcommitPercent and spec.memory.hugepages should not be requested together."
        );
    }

    #[test]
    fn a_preference_names_a_known_topology_and_a_supported_spread() {
        let send = |c| preference(c).send(Webhook::ClusterPreferenceValidate);
        assert!(send(json!({"preferredCPUTopology": "cores"})).allowed);
        assert_eq!(
            send(json!({"preferredCPUTopology": "diagonal"})).message(),
            "unknown preferredCPUTopology diagonal"
        );
        assert_eq!(
            send(json!({"preferredCPUTopology": "spread", "spreadOptions": {"across": "Nodes"}}))
                .message(),
            "across Nodes is not supported"
        );
        assert_eq!(
            send(json!({"preferredCPUTopology": "spread",
                "spreadOptions": {"across": "CoresThreads", "ratio": 4}}))
            .message(),
            "only a ratio of 2 (1 core 2 threads) is allowed when spreading vCPUs over cores and threads"
        );
        let old = send(json!({"preferredCPUTopology": "preferSockets"}));
        assert!(old.allowed);
        assert_eq!(
            old.warnings,
            [
                "PreferredCPUTopology preferSockets is deprecated for removal in a future release, please use sockets instead"
            ]
        );
    }
}
