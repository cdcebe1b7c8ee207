//! The cloud-init data as KubeVirt's `PreCloudInitIso` hook point carries it, and back.
//!
//! KubeVirt hands the sidecar its `CloudInitData` (data source, the metadata of that source,
//! user, network and devices data, volume name) and writes the ISO from what comes back. kvrs
//! builds the same object from the data it is about to write, and takes from the answer the user
//! data, the network data and, when the hook sent one, the metadata.

use kvrs_api::VirtualMachineInstance;

use super::HookSidecars;

/// What goes into the cloud-init ISO.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudInitFiles {
    /// `user-data` / `openstack/latest/user_data`.
    pub user_data: String,
    /// `network-config` / `openstack/latest/network_data.json` (`None`: not written).
    pub network_data: Option<String>,
    /// `meta-data` / `openstack/latest/meta_data.json`.
    pub meta_data: serde_json::Value,
}

/// KubeVirt's `CloudInitData` JSON of these files (pure).
pub fn cloud_init_data(volume: &str, no_cloud: bool, files: &CloudInitFiles) -> serde_json::Value {
    let (source, no_cloud_meta, config_drive_meta) = if no_cloud {
        ("noCloud", files.meta_data.clone(), serde_json::Value::Null)
    } else {
        (
            "configDrive",
            serde_json::Value::Null,
            files.meta_data.clone(),
        )
    };
    serde_json::json!({
        "DataSource": source,
        "NoCloudMetaData": no_cloud_meta,
        "ConfigDriveMetaData": config_drive_meta,
        "UserData": files.user_data,
        "NetworkData": files.network_data.clone().unwrap_or_default(),
        "DevicesData": null,
        "VolumeName": volume,
    })
}

/// Lets the `PreCloudInitIso` sidecar (if any) change the files; unchanged without one.
pub async fn pre_cloud_init_iso(
    hooks: &HookSidecars,
    vmi: &VirtualMachineInstance,
    volume: &str,
    no_cloud: bool,
    files: CloudInitFiles,
) -> Result<CloudInitFiles, super::HookError> {
    if !hooks.wants_cloud_init() {
        return Ok(files);
    }
    let source = if no_cloud { "noCloud" } else { "configDrive" };
    let data = cloud_init_data(volume, no_cloud, &files);
    let network = files.network_data.clone().unwrap_or_default();
    let Some(answer) = hooks
        .pre_cloud_init_iso(vmi, source, &data, &files.user_data, &network)
        .await?
    else {
        return Ok(files);
    };
    let meta_data = answer
        .meta_data(no_cloud)
        .cloned()
        .unwrap_or(files.meta_data);
    Ok(CloudInitFiles {
        user_data: answer.user_data,
        network_data: Some(answer.network_data).filter(|n| !n.is_empty()),
        meta_data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_become_kubevirts_cloud_init_data() {
        let files = CloudInitFiles {
            user_data: "#cloud-config\n".into(),
            network_data: None,
            meta_data: serde_json::json!({"instance-id": "vm.ns", "local-hostname": "vm"}),
        };
        let data = cloud_init_data("cloudinitdisk", true, &files);
        assert_eq!(data["DataSource"], "noCloud");
        assert_eq!(data["NoCloudMetaData"]["instance-id"], "vm.ns");
        assert!(data["ConfigDriveMetaData"].is_null());
        assert_eq!(data["NetworkData"], "");
        assert_eq!(data["VolumeName"], "cloudinitdisk");
        let data = cloud_init_data("cfg", false, &files);
        assert_eq!(data["DataSource"], "configDrive");
        assert!(data["NoCloudMetaData"].is_null());
    }
}
