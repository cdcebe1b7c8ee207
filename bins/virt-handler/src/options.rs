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
        interface_domain_attachment: domain_attachments(vmi, config),
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

/// How each interface attaches to the domain, as KubeVirt's `DomainAttachmentByInterfaceName`:
/// `tap` for masquerade and bridge; a binding plugin's interface takes its plugin's
/// `domainAttachmentType` from the cluster (`managedTap` sent as `tap`); others are absent.
fn domain_attachments(
    vmi: &VirtualMachineInstance,
    config: &NodeConfig,
) -> HashMap<String, String> {
    let ifaces = vmi.spec.domain.devices.interfaces.as_deref();
    kvrs_converter::domain_attachment_by_interface_name(ifaces.unwrap_or_default(), |name| {
        config.bindings.attachment(name)
    })
    .into_iter()
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
    fn binding_plugins_attach_as_the_cluster_says() {
        let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "n"},
            "spec": {"domain": {"devices": {"interfaces": [
                {"name": "default", "bridge": {}},
                {"name": "m", "binding": {"name": "mtap"}},
                {"name": "t", "binding": {"name": "plaintap"}},
                {"name": "p", "binding": {"name": "passt"}},
                {"name": "u", "binding": {"name": "unregistered"}}
            ]}}}
        }))
        .unwrap();
        let mut config = default_config();
        config.bindings = kvrs_node::network::BindingPlugins::from_iter([
            ("mtap", "managedTap"),
            ("plaintap", "tap"),
        ]);
        let o = sync_options(&vmi, &config);
        let want: HashMap<String, String> = [("default", "tap"), ("m", "tap"), ("t", "tap")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(o.interface_domain_attachment, want);
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
