//! VM `migrate` as KubeVirt v1.9.0's `MigrateVMRequestHandler` (`pkg/virt-api/rest/lifecycle.go`)
//! decides it: the body read first (a bad one is a 400 before anything is read), then the VM
//! (404 if missing), its VMI (404 if missing), a VMI not `Running` refused with 409 `VM is not
//! running`, and otherwise one VirtualMachineInstanceMigration created (a dry run when the
//! options say so) and 202 answered.
//!
//! virt-api checks nothing else: whether the VMI is migratable is the migration webhook's and
//! the migration controller's to say, once the object exists.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::ApiError;
use super::vm::{VM_NOT_RUNNING, decode};

/// The `generateName` of the migrations virt-api creates.
pub const GENERATE_NAME: &str = "kubevirt-migrate-vm-";

/// KubeVirt's `MigrateOptions`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MigrateOptions {
    /// `["All"]` for a dry run (passed to the create as its `dryRun`).
    #[serde(default)]
    pub dry_run: Vec<String>,
    /// Labels the target node must carry besides the VMI's own selectors.
    #[serde(default)]
    pub added_node_selector: Option<Map<String, Value>>,
}

impl MigrateOptions {
    /// Reads the request's body (KubeVirt's `decodeBody`: empty is the defaults, else a 400).
    pub fn read(body: &[u8]) -> Result<MigrateOptions, ApiError> {
        decode(body)
    }

    /// Whether the create is a dry run.
    pub fn dry_run(&self) -> bool {
        !self.dry_run.is_empty()
    }
}

/// The migration to create for the VM `name`, whose VMI was read as `vmi` (`None`: none):
/// KubeVirt's refusals, or the object (its namespace left to the create's path).
pub fn migration(
    name: &str,
    vmi: Option<&Value>,
    options: &MigrateOptions,
) -> Result<Value, ApiError> {
    let Some(vmi) = vmi else {
        return Err(ApiError::not_found("virtualmachineinstance", name));
    };
    if vmi["status"]["phase"].as_str() != Some("Running") {
        return Err(ApiError::conflict(name, VM_NOT_RUNNING));
    }
    let mut spec = json!({"vmiName": name});
    if let Some(selector) = options
        .added_node_selector
        .as_ref()
        .filter(|s| !s.is_empty())
    {
        spec["addedNodeSelector"] = Value::Object(selector.clone());
    }
    Ok(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"generateName": GENERATE_NAME},
        "spec": spec,
    }))
}

/// A refused create, as KubeVirt answers it (`errors.NewInternalError(err)`).
pub fn create_failure(message: &str) -> ApiError {
    ApiError::internal(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(phase: &str) -> Value {
        json!({"metadata": {"name": "vm1"}, "status": {"phase": phase}})
    }

    #[test]
    fn options_are_read_as_kubevirt_decodes_them() {
        assert_eq!(
            MigrateOptions::read(b"").unwrap(),
            MigrateOptions::default()
        );
        let o = MigrateOptions::read(
            br#"{"kind":"MigrateOptions","apiVersion":"subresources.kubevirt.io/v1","dryRun":["All"],"addedNodeSelector":{"zone":"b"}}"#,
        )
        .unwrap();
        assert!(o.dry_run());
        assert_eq!(o.added_node_selector.unwrap()["zone"], "b");
        let e = MigrateOptions::read(b"{nope").unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            e.message
                .starts_with("Can not unmarshal Request body to struct, error: ")
        );
    }

    #[test]
    fn a_running_vmi_gets_kubevirts_migration() {
        let o = MigrateOptions {
            added_node_selector: Some(
                serde_json::from_value(json!({"kubernetes.io/hostname": "node02"})).unwrap(),
            ),
            ..Default::default()
        };
        assert_eq!(
            migration("vm1", Some(&vmi("Running")), &o).unwrap(),
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"generateName": "kubevirt-migrate-vm-"},
                "spec": {"vmiName": "vm1", "addedNodeSelector": {"kubernetes.io/hostname": "node02"}}})
        );
        // No selector: the spec names only the VMI.
        let m = migration("vm1", Some(&vmi("Running")), &MigrateOptions::default()).unwrap();
        assert_eq!(m["spec"], json!({"vmiName": "vm1"}));
    }

    #[test]
    fn refusals_are_kubevirts() {
        let o = MigrateOptions::default();
        let e = migration("vm1", None, &o).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (404, "virtualmachineinstance.kubevirt.io \"vm1\" not found")
        );
        for phase in [
            "Pending",
            "Scheduling",
            "Scheduled",
            "Succeeded",
            "Failed",
            "",
        ] {
            let e = migration("vm1", Some(&vmi(phase)), &o).unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (
                    409,
                    "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": VM is not running"
                ),
                "{phase}"
            );
        }
        assert_eq!(create_failure("boom").body()["code"], 500);
    }
}
