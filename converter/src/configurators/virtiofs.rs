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
pub struct Virtiofs;

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
