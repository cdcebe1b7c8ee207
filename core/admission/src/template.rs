//! Turning a VirtualMachine into the VirtualMachineInstance its controller creates.
//!
//! [`vmi_from_vm`] is what KubeVirt v1.9.0's VM controller does when it starts a VM, before the
//! VMI goes to the API server (and so before [`crate::admit`]):
//!
//! - metadata: the template's labels and annotations, the VM's **name** and **namespace** (the
//!   template's own name/generateName are ignored), an owner reference to the VM marked as its
//!   controller (only when the VM has a `metadata.uid`: an owner reference needs one);
//! - spec: the template's spec, unchanged, except
//!   - `startStrategy: Paused` when the VM's first state change request is a start request
//!     with `paused: "true"` (what `virtctl start --paused` asks for);
//!   - `domain.firmware.uuid`, when the template has none, set to the **stable firmware UUID**
//!     [`firmware_uuid_for_vm`]: a version 5 UUID (SHA-1) of the VM's name in KubeVirt's fixed
//!     firmware namespace `6a1a24a1-4061-4607-8bf4-a3963d0c5895`. It depends only on the name,
//!     so a guest sees the same SMBIOS UUID on every start;
//!   - a plain disk for every volume no disk or filesystem names.
//!
//! [`vmi_to_start`] is the VMI the controller actually creates when it starts the VM: the above,
//! plus the controller's own device steps (an auto-attached input device, the default pod
//! network). The VM decision (`kvrs_decide::vm`, which depends on this crate) adds its
//! bookkeeping metadata on top.
//!
//! Not modelled: removing a completed memory-dump volume (it needs the VM's memory dump
//! status) and instancetype/preference expansion (done by virt-api on the VM, not here).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::ClusterConfig;
use crate::api::{API_VERSION, Firmware, Input, VirtualMachine, VirtualMachineInstance};
use crate::defaults::DefaultInterfaceError;
/// The firmware UUID KubeVirt's VM controller gives the VMIs of a VM called `vm_name`
/// (UUID v5 of the name in KubeVirt's firmware namespace; see the module documentation).
pub use crate::defaults::firmware::legacy_uuid_for_name as firmware_uuid_for_vm;

/// Why a VM cannot be turned into a VMI.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The VM has no `spec.template.spec` to start from.
    #[error("spec.template.spec: missing; a VirtualMachine needs a VMI template to start")]
    MissingTemplateSpec,
    /// The VM has no name, so neither the VMI name nor the firmware UUID can be derived.
    #[error("metadata.name: missing; the VMI and its firmware UUID are named after the VM")]
    MissingName,
    /// The template needs the default pod interface and the cluster's default binding is unusable.
    #[error(transparent)]
    DefaultInterface(#[from] DefaultInterfaceError),
}

/// The VMI KubeVirt's VM controller would create to run `vm` (see the module documentation).
pub fn vmi_from_vm(vm: &VirtualMachine) -> Result<VirtualMachineInstance, TemplateError> {
    let name = vm
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(TemplateError::MissingName)?;
    let template = &vm.spec.template;
    let mut spec = template
        .spec
        .clone()
        .ok_or(TemplateError::MissingTemplateSpec)?;

    let owner_references = vm.metadata.uid.as_ref().map(|uid| {
        vec![OwnerReference {
            api_version: API_VERSION.to_string(),
            kind: "VirtualMachine".to_string(),
            name: name.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]
    });
    let metadata = ObjectMeta {
        name: Some(name.clone()),
        generate_name: None,
        namespace: vm.metadata.namespace.clone(),
        owner_references,
        ..template.metadata.clone()
    };

    if start_paused_requested(vm) {
        spec.start_strategy = Some("Paused".to_string());
    }
    let firmware = spec.domain.firmware.get_or_insert_with(Firmware::default);
    if firmware.uuid.as_deref().unwrap_or("").is_empty() {
        firmware.uuid = Some(firmware_uuid_for_vm(&name));
    }
    crate::defaults::add_disks_for_bare_volumes(&mut spec);

    Ok(VirtualMachineInstance {
        api_version: Some(API_VERSION.to_string()),
        kind: Some("VirtualMachineInstance".to_string()),
        metadata,
        spec,
        status: None,
        extra: Default::default(),
    })
}

/// The VMI KubeVirt's VM controller creates when it starts `vm`: [`vmi_from_vm`], then an input
/// device named `default-0` when the template asks for `autoattachInputDevice` and has no input
/// (bus and type are left to preferences and the webhook), then the default pod network and
/// interface when the template names none (see [`crate::defaults`]; a `slirp` default binding
/// is an error, as in KubeVirt).
pub fn vmi_to_start(
    vm: &VirtualMachine,
    config: &ClusterConfig,
) -> Result<VirtualMachineInstance, TemplateError> {
    let mut vmi = vmi_from_vm(vm)?;
    add_controller_devices(&mut vmi, config)?;
    Ok(vmi)
}

/// The VM controller's own device steps on the VMI it is about to create (the part of
/// [`vmi_to_start`] after [`vmi_from_vm`]): the `default-0` input device and the default pod
/// network. Separate so that a caller can run KubeVirt's instancetype step that comes between
/// them (the preference's auto-attach values, applied before the controller adds devices).
pub fn add_controller_devices(
    vmi: &mut VirtualMachineInstance,
    config: &ClusterConfig,
) -> Result<(), TemplateError> {
    let devices = &mut vmi.spec.domain.devices;
    let has_inputs = devices.inputs.as_ref().is_some_and(|i| !i.is_empty());
    if devices.autoattach_input_device == Some(true) && !has_inputs {
        devices.inputs = Some(vec![Input {
            name: "default-0".to_string(),
            ..Default::default()
        }]);
    }
    crate::defaults::add_default_pod_interface(&mut vmi.spec, config)?;
    Ok(())
}

/// The VM's first state change request asks to start paused (`virtctl start --paused`).
pub(crate) fn start_paused_requested(vm: &VirtualMachine) -> bool {
    let Some(first) = vm
        .status
        .as_ref()
        .and_then(|s| s.state_change_requests.as_ref())
        .and_then(|r| r.first())
    else {
        return false;
    };
    first.action == "Start"
        && first
            .data
            .as_ref()
            .and_then(|d| d.get("paused"))
            .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::VirtualMachine;

    fn vm(json: serde_json::Value) -> VirtualMachine {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn firmware_uuid_is_kubevirts_name_derived_uuid() {
        // Known values from KubeVirt's VM controller for these VM names.
        assert_eq!(
            firmware_uuid_for_vm("vm-cirros"),
            firmware_uuid_for_vm("vm-cirros"),
            "stable"
        );
        assert_ne!(firmware_uuid_for_vm("a"), firmware_uuid_for_vm("b"));
        let uuid = firmware_uuid_for_vm("testvm");
        assert_eq!(uuid.len(), 36);
        assert_eq!(&uuid[14..15], "5", "version 5");
    }

    #[test]
    fn the_vmi_takes_name_namespace_labels_and_owner_from_the_vm() {
        let vm = vm(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "web", "namespace": "prod", "uid": "u-1"},
            "spec": {"runStrategy": "Always", "template": {
                "metadata": {"name": "ignored", "labels": {"app": "web"},
                             "annotations": {"a": "b"}},
                "spec": {"domain": {"devices": {}}, "volumes": [
                    {"name": "root", "containerDisk": {"image": "img:1"}}]}}}
        }));
        let vmi = vmi_from_vm(&vm).unwrap();
        assert_eq!(vmi.metadata.name.as_deref(), Some("web"));
        assert_eq!(vmi.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(vmi.metadata.labels.unwrap()["app"], "web");
        assert_eq!(vmi.metadata.annotations.unwrap()["a"], "b");
        let owner = &vmi.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("VirtualMachine", "u-1")
        );
        assert_eq!(owner.controller, Some(true));
        let uuid = vmi.spec.domain.firmware.unwrap().uuid.unwrap();
        assert_eq!(uuid, firmware_uuid_for_vm("web"));
        let disks = vmi.spec.domain.devices.disks.unwrap();
        assert_eq!(disks[0].name, "root", "a bare volume gets a disk");
    }

    #[test]
    fn a_template_uuid_wins_and_paused_start_requests_are_honoured() {
        let vm = vm(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"template": {"spec": {"domain": {"devices": {},
                "firmware": {"uuid": "11111111-2222-3333-4444-555555555555"}}}}},
            "status": {"stateChangeRequests": [{"action": "Start", "data": {"paused": "true"}}]}
        }));
        let vmi = vmi_from_vm(&vm).unwrap();
        assert_eq!(
            vmi.spec.domain.firmware.unwrap().uuid.as_deref(),
            Some("11111111-2222-3333-4444-555555555555")
        );
        assert_eq!(vmi.spec.start_strategy.as_deref(), Some("Paused"));
        assert!(
            vmi.metadata.owner_references.is_none(),
            "no uid, no owner reference"
        );
    }

    #[test]
    fn a_vm_without_template_spec_or_name_is_an_error() {
        let no_spec = vm(serde_json::json!({"metadata": {"name": "x"}, "spec": {"template": {}}}));
        assert_eq!(
            vmi_from_vm(&no_spec),
            Err(TemplateError::MissingTemplateSpec)
        );
        let no_name = vm(
            serde_json::json!({"metadata": {}, "spec": {"template": {"spec": {"domain": {"devices": {}}}}}}),
        );
        assert_eq!(vmi_from_vm(&no_name), Err(TemplateError::MissingName));
    }

    #[test]
    fn the_started_vmi_gets_the_controllers_input_device_and_pod_network() {
        let vm = vm(serde_json::json!({
            "metadata": {"name": "s", "uid": "u"},
            "spec": {"template": {"spec": {"domain": {"devices": {
                "autoattachInputDevice": true}}}}}
        }));
        let vmi = vmi_to_start(&vm, &ClusterConfig::default()).unwrap();
        let devices = &vmi.spec.domain.devices;
        assert_eq!(devices.inputs.as_ref().unwrap()[0].name, "default-0");
        let iface = &devices.interfaces.as_ref().unwrap()[0];
        assert_eq!(iface.name, "default");
        assert!(
            iface.bridge.is_some(),
            "the cluster default binding is bridge"
        );
        assert!(vmi.spec.networks.unwrap()[0].pod.is_some());

        let masquerade = ClusterConfig {
            default_network_interface: "masquerade".into(),
            ..ClusterConfig::default()
        };
        let vmi = vmi_to_start(&vm, &masquerade).unwrap();
        let ifaces = vmi.spec.domain.devices.interfaces.unwrap();
        assert!(ifaces[0].masquerade.is_some());

        let slirp = ClusterConfig {
            default_network_interface: "slirp".into(),
            ..ClusterConfig::default()
        };
        let err = vmi_to_start(&vm, &slirp).unwrap_err();
        assert_eq!(err.to_string(), "slirp interface is deprecated as of v1.3");
        assert!(
            vmi_from_vm(&vm).unwrap().spec.networks.is_none(),
            "plain vmi_from_vm adds no network"
        );
    }
}
