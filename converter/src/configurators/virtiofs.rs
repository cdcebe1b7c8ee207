//! `<filesystem>`: virtiofs shares served by virtiofsd sockets.

use super::Configurator;
use crate::domain::{
    Domain, FilesystemDevice, FilesystemDriver, FilesystemSource, FilesystemTarget,
};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

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
        for fs in vmi.spec.domain.devices.filesystems.iter().flatten() {
            domain.devices.filesystems.push(FilesystemDevice {
                kind: "mount".into(),
                access_mode: "passthrough".into(),
                driver: Some(FilesystemDriver {
                    kind: "virtiofs".into(),
                    queue: Some("1024".into()),
                }),
                source: Some(FilesystemSource {
                    dir: String::new(),
                    socket: Some(format!("{VIRTIOFS_SOCKET_DIR}/{}.sock", fs.name)),
                }),
                target: Some(FilesystemTarget {
                    dir: Some(fs.name.clone()),
                }),
                binary: None,
            });
        }
        Ok(())
    }
}
