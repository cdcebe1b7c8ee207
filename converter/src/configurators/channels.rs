//! `<channel>`: the guest agent channel, plus the downward-metrics channel when requested.

use super::Configurator;
use crate::domain::{Channel, ChannelSource, ChannelTarget, Domain};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Socket of the downward-metrics channel inside the launcher.
pub(super) const DOWNWARD_METRICS_SOCKET: &str =
    "/var/run/kubevirt-private/downwardmetrics-channel/downwardmetrics.sock";

/// Writes the channels.
pub(super) struct Channels;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, run, vmi};
    use serde_json::json;

    fn target_names(domain: &Domain) -> Vec<&str> {
        let channels = &domain.devices.channels;
        channels
            .iter()
            .filter_map(|c| c.target.as_ref()?.name.as_deref())
            .collect()
    }

    #[test]
    fn the_guest_agent_channel_is_always_written() {
        let d = run(&Channels, &vmi(json!({"domain": {"devices": {}}}))).unwrap();
        assert_eq!(target_names(&d), ["org.qemu.guest_agent.0"]);
        // No source: libvirt picks the socket path.
        insta::assert_snapshot!(element(&d, "channel"), @r#"
        <channel type="unix">
        	<target name="org.qemu.guest_agent.0" type="virtio"/>
        </channel>
        "#);
    }

    #[test]
    fn downward_metrics_add_the_vhostmd_channel_on_its_socket() {
        let vmi = vmi(json!({"domain": {"devices": {"downwardMetrics": {}}}}));
        let d = run(&Channels, &vmi).unwrap();
        assert_eq!(
            target_names(&d),
            ["org.qemu.guest_agent.0", "org.github.vhostmd.1"]
        );
        let source = d.devices.channels[1].source.as_ref().unwrap();
        assert_eq!(
            (source.mode.as_ref(), source.path.as_ref()),
            ("bind", DOWNWARD_METRICS_SOCKET)
        );
    }
}
