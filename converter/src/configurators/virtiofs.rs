//! `<filesystem>`: virtiofs shares served by virtiofsd sockets.

use super::Configurator;
use crate::domain::{
    Domain, FilesystemDevice, FilesystemDriver, FilesystemSource, FilesystemTarget,
};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::names::path_component;

/// Where virtiofsd containers put their sockets.
const VIRTIOFS_SOCKET_DIR: &str = "/var/run/kubevirt/virtiofs-containers";

/// Writes virtiofs filesystems.
pub(super) struct Virtiofs;

impl Configurator for Virtiofs {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        for (i, fs) in vmi
            .spec
            .domain
            .devices
            .filesystems
            .iter()
            .flatten()
            .enumerate()
        {
            // The socket's file name and the mount tag: one plain name.
            let name = path_component(
                format_args!("spec.domain.devices.filesystems[{i}].name"),
                &fs.name,
            )?;
            domain.devices.filesystems.push(FilesystemDevice {
                kind: "mount".into(),
                access_mode: "passthrough".into(),
                driver: Some(FilesystemDriver {
                    kind: "virtiofs".into(),
                    queue: Some("1024".into()),
                }),
                source: Some(FilesystemSource {
                    dir: String::new().into(),
                    socket: Some(format!("{VIRTIOFS_SOCKET_DIR}/{name}.sock").into()),
                }),
                target: Some(FilesystemTarget {
                    dir: Some(name.to_string().into()),
                }),
                binary: None,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, run, vmi};
    use serde_json::json;

    #[test]
    fn no_filesystems_without_virtiofs_shares() {
        let d = run(&Virtiofs, &vmi(json!({"domain": {"devices": {}}}))).unwrap();
        assert!(d.devices.filesystems.is_empty());
    }

    #[test]
    fn each_share_is_a_virtiofs_mount_on_its_daemons_socket_tagged_by_name() {
        let vmi = vmi(json!({"domain": {"devices": {"filesystems": [
            {"name": "shared", "virtiofs": {}}, {"name": "config", "virtiofs": {}}
        ]}}}));
        let d = run(&Virtiofs, &vmi).unwrap();
        assert_eq!(d.devices.filesystems.len(), 2);
        insta::assert_snapshot!(element(&d, "filesystem"), @r#"
        <filesystem type="mount" accessMode="passthrough">
        	<source dir="" socket="/var/run/kubevirt/virtiofs-containers/shared.sock"/>
        	<target dir="shared"/>
        	<driver type="virtiofs" queue="1024"/>
        </filesystem>
        "#);
    }
}
