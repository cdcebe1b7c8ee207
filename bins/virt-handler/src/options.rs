//! The options virt-handler sends with `SyncVirtualMachine`: cluster facts the launcher cannot
//! read from the VMI (SMBIOS, the memory-balloon statistics period and the cluster switches, from
//! the live KubeVirt CR configuration; how each interface attaches to the domain), as KubeVirt's
//! `virtualMachineOptions` builds them.

use std::collections::HashMap;

use kvrs_api::VirtualMachineInstance;
use kvrs_ipc::VirtualMachineOptions;
use kvrs_ipc::proto::cmd::v1::{ClusterConfig, SmBios, Topology};

use crate::config::NodeConfig;

/// The options for `vmi` under the cluster configuration `config`.
pub fn sync_options(vmi: &VirtualMachineInstance, config: &NodeConfig) -> VirtualMachineOptions {
    let smbios = &config.cluster.smbios;
    let gate = |name| config.cluster.gate(name);
    VirtualMachineOptions {
        virtual_machine_sm_bios: Some(SmBios {
            family: smbios.family.clone(),
            manufacturer: smbios.manufacturer.clone(),
            product: smbios.product.clone(),
            sku: smbios.sku.clone(),
            version: smbios.version.clone(),
        }),
        mem_balloon_stats_period: config.cluster.mem_balloon_stats_period,
        preallocated_volumes: preallocated_volumes(vmi),
        topology: Some(Topology::default()),
        // Kept empty by KubeVirt for old launchers.
        disks_info: HashMap::new(),
        cluster_config: Some(ClusterConfig {
            free_page_reporting_disabled: config.daemon.free_page_reporting_disabled,
            bochs_display_for_efi_guests: !config.daemon.vga_display_for_efi_guests,
            serial_console_log_disabled: config.daemon.serial_console_log_disabled,
            pcinuma_aware_topology_enabled: gate("PCINUMAAwareTopology"),
            vgpu_live_migration_enabled: gate("VGPULiveMigration"),
            grace_io_virtualization_enabled: gate("GraceIOVirtualization"),
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

    fn default_config() -> NodeConfig {
        crate::config::derive(&kvrs_admission::live_config::default_kubevirt_cr())
    }

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
        let o = sync_options(&vmi, &default_config());
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
        let cluster = o.cluster_config.unwrap();
        assert!(cluster.bochs_display_for_efi_guests);
        assert!(!cluster.free_page_reporting_disabled && !cluster.serial_console_log_disabled);
    }

    #[test]
    fn smbios_balloon_period_and_cluster_switches_come_from_the_kubevirt_cr() {
        let mut kv = kvrs_admission::live_config::default_kubevirt_cr();
        kv.config.smbios.manufacturer = "Acme".into();
        kv.config.smbios.sku = "A1".into();
        kv.config.mem_balloon_stats_period = 0;
        kv.config.feature_gates.insert("VGPULiveMigration".into());
        kv.daemon.vga_display_for_efi_guests = true;
        kv.daemon.free_page_reporting_disabled = true;
        kv.daemon.serial_console_log_disabled = true;
        let o = sync_options(
            &VirtualMachineInstance::default(),
            &crate::config::derive(&kv),
        );
        let smbios = o.virtual_machine_sm_bios.unwrap();
        assert_eq!(
            (
                smbios.manufacturer.as_str(),
                smbios.sku.as_str(),
                smbios.family.as_str()
            ),
            ("Acme", "A1", "KubeVirt")
        );
        assert_eq!(o.mem_balloon_stats_period, 0);
        let cluster = o.cluster_config.unwrap();
        assert!(!cluster.bochs_display_for_efi_guests);
        assert!(cluster.free_page_reporting_disabled && cluster.serial_console_log_disabled);
        assert!(cluster.vgpu_live_migration_enabled && !cluster.grace_io_virtualization_enabled);
    }
}
