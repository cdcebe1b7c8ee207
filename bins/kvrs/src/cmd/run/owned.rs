//! What `kvrs run` applied, and which objects of the API server are therefore its own: the VMI
//! of each applied VM or VMI (same namespace and name, as KubeVirt names a VM's VMI) and the
//! launcher pods those VMIs own. Other VMs created through the run's API server run and end on
//! their own: the run neither reports them nor stops or waits on their account.

use std::collections::BTreeSet;

use serde_json::Value;

/// The `(namespace, name)` of each applied object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owned(BTreeSet<(String, String)>);

fn namespace_of(doc: &Value) -> &str {
    doc.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
}

fn name_of(doc: &Value) -> &str {
    doc.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl Owned {
    /// The objects of the manifests `kvrs run` applies.
    pub fn of_manifests(manifests: &[Value]) -> Self {
        Self(
            manifests
                .iter()
                .map(|d| (namespace_of(d).to_string(), name_of(d).to_string()))
                .collect(),
        )
    }

    /// Whether `vmi` is the VMI of an applied VM or an applied VMI.
    pub fn is_own_vmi(&self, vmi: &Value) -> bool {
        self.0
            .contains(&(namespace_of(vmi).to_string(), name_of(vmi).to_string()))
    }

    /// Whether `pod` belongs to one of the run's own VMIs (its controller owner reference).
    pub fn is_own_pod(&self, pod: &Value) -> bool {
        let ns = namespace_of(pod);
        pod.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|r| {
                r.get("kind").and_then(Value::as_str) == Some("VirtualMachineInstance")
                    && r.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| self.0.contains(&(ns.to_string(), n.to_string())))
            })
    }
}

/// Whether a VM's spec asks it to be stopped (`runStrategy: Halted` or `running: false`), as
/// `virtctl stop` or an edit leaves it: its VMI ending is then the stop the user asked for.
pub fn stop_requested(vm: &Value) -> bool {
    match vm.pointer("/spec/running").and_then(Value::as_bool) {
        Some(running) => !running,
        None => vm.pointer("/spec/runStrategy").and_then(Value::as_str) == Some("Halted"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(ns: Option<&str>, name: &str) -> Value {
        let mut md = json!({"name": name});
        if let Some(ns) = ns {
            md["namespace"] = json!(ns);
        }
        json!({"metadata": md})
    }

    #[test]
    fn only_the_applied_objects_and_their_pods_are_own() {
        let owned = Owned::of_manifests(&[obj(None, "guest")]);
        assert!(owned.is_own_vmi(&obj(Some("default"), "guest")));
        assert!(!owned.is_own_vmi(&obj(Some("default"), "second")));
        assert!(!owned.is_own_vmi(&obj(Some("other"), "guest")));
        let pod = |owner: &str, ns: &str| {
            json!({"metadata": {"namespace": ns, "name": "virt-launcher-x", "ownerReferences": [
                {"kind": "VirtualMachineInstance", "name": owner, "controller": true}]}})
        };
        assert!(owned.is_own_pod(&pod("guest", "default")));
        assert!(!owned.is_own_pod(&pod("second", "default")));
        assert!(!owned.is_own_pod(&pod("guest", "other")));
        assert!(!owned.is_own_pod(&json!({"metadata": {"name": "p"}})));
    }

    #[test]
    fn a_halted_or_not_running_vm_was_stopped_on_request() {
        assert!(stop_requested(&json!({"spec": {"runStrategy": "Halted"}})));
        assert!(stop_requested(&json!({"spec": {"running": false}})));
        assert!(!stop_requested(&json!({"spec": {"runStrategy": "Always"}})));
        assert!(!stop_requested(&json!({"spec": {"running": true}})));
    }
}
