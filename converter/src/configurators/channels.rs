//! `<channel>`: the guest agent channel, plus the downward-metrics channel when requested.

use super::Configurator;
use crate::domain::{Channel, ChannelSource, ChannelTarget, Domain};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Socket of the downward-metrics channel inside the launcher.
pub const DOWNWARD_METRICS_SOCKET: &str =
    "/var/run/kubevirt-private/downwardmetrics-channel/downwardmetrics.sock";

/// Writes the channels.
pub struct Channels;

impl Configurator for Channels {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        domain.devices.channels.push(Channel {
            kind: "unix".into(),
            source: None, // libvirt picks the path
            target: Some(ChannelTarget {
                name: Some("org.qemu.guest_agent.0".into()),
                kind: "virtio".into(),
                ..ChannelTarget::default()
            }),
        });
        if vmi.spec.domain.devices.downward_metrics.is_some() {
            domain.devices.channels.push(Channel {
                kind: "unix".into(),
                source: Some(ChannelSource {
                    mode: "bind".into(),
                    path: DOWNWARD_METRICS_SOCKET.into(),
                }),
                target: Some(ChannelTarget {
                    name: Some("org.github.vhostmd.1".into()),
                    kind: "virtio".into(),
                    ..ChannelTarget::default()
                }),
            });
        }
        Ok(())
    }
}
