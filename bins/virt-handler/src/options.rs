//! The options virt-handler sends with `SyncVirtualMachine`: cluster facts the launcher cannot
//! read from the VMI (SMBIOS, the memory-balloon statistics period, how each interface attaches
//! to the domain).

use std::collections::HashMap;

use kvrs_api::VirtualMachineInstance;
use kvrs_ipc::VirtualMachineOptions;
use kvrs_ipc::proto::cmd::v1::{ClusterConfig, SmBios, Topology};

/// KubeVirt's default memory-balloon statistics period, in seconds.
pub const MEM_BALLOON_STATS_PERIOD: u32 = 10;

/// The options for `vmi` with KubeVirt's default cluster configuration.
pub fn sync_options(vmi: &VirtualMachineInstance) -> VirtualMachineOptions {
    VirtualMachineOptions {
        virtual_machine_sm_bios: Some(SmBios {
            family: "KubeVirt".into(),
            manufacturer: "KubeVirt".into(),
            product: "None".into(),
            ..SmBios::default()
        }),
        mem_balloon_stats_period: MEM_BALLOON_STATS_PERIOD,
        preallocated_volumes: preallocated_volumes(vmi),
        topology: Some(Topology::default()),
        // Kept empty by KubeVirt for old launchers.
        disks_info: HashMap::new(),
        cluster_config: Some(ClusterConfig {
            bochs_display_for_efi_guests: true,
            ..ClusterConfig::default()
        }),
        interface_domain_attachment: domain_attachments(vmi),
        ..VirtualMachineOptions::default()
    }
}

/// Volumes whose PVC is preallocated (from `status.volumeStatus`).
fn preallocated_volumes(vmi: &VirtualMachineInstance) -> Vec<String> {
    vmi.status
        .as_ref()
        .and_then(|s| s.volume_status.as_ref())
        .into_iter()
        .flatten()
        .filter(|v| {
            v.persistent_volume_claim_info
                .as_ref()
                .and_then(|p| p.preallocated)
                .unwrap_or(false)
        })
        .map(|v| v.name.clone())
        .collect()
}

/// `tap` for every interface bound with masquerade or bridge (the core bindings KubeVirt attaches
/// through a tap device); binding plugins would add their own attachment here.
fn domain_attachments(vmi: &VirtualMachineInstance) -> HashMap<String, String> {
    vmi.spec
        .domain
        .devices
        .interfaces
        .iter()
        .flatten()
        .filter(|i| i.masquerade.is_some() || i.bridge.is_some())
        .map(|i| (i.name.clone(), "tap".to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_masquerade_interface_attaches_through_a_tap_and_smbios_is_kubevirts() {
        let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "n"},
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}},
                {"name": "other", "sriov": {}}
            ]}}}
        }))
        .unwrap();
        let o = sync_options(&vmi);
        assert_eq!(
            o.interface_domain_attachment,
            HashMap::from([("default".to_string(), "tap".to_string())])
        );
        let smbios = o.virtual_machine_sm_bios.unwrap();
        assert_eq!(
            (smbios.family.as_str(), smbios.product.as_str()),
            ("KubeVirt", "None")
        );
        assert_eq!(o.mem_balloon_stats_period, 10);
        assert!(o.cluster_config.unwrap().bochs_display_for_efi_guests);
    }
}
