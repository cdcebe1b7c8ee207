//! `<graphics>` (VNC on a socket) and `<video>`.

use super::{Configurator, Env, util};
use crate::context::Arch;
use crate::domain::{Domain, Few, Graphics as DomGraphics, GraphicsListen, Video, VideoModel};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

const DEFAULT_HEADS: u32 = 1;
const DEFAULT_VRAM: u32 = 16384;

/// Writes VNC graphics and the video device.
pub(super) struct Graphics<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

impl Configurator for Graphics<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let devices = &vmi.spec.domain.devices;
        if devices.autoattach_graphics_device == Some(false)
            || self.env.ctx.allow_cross_arch_emulation
        {
            return Ok(());
        }
        domain.devices.graphics = Few::from([DomGraphics {
            listen: Some(GraphicsListen {
                kind: "socket".into(),
                socket: Some(
                    util::cat([
                        util::VIRT_PRIVATE_DIR,
                        "/",
                        util::uid_component(vmi)?,
                        "/virt-vnc",
                    ])
                    .into(),
                ),
                ..GraphicsListen::default()
            }),
            kind: "vnc".into(),
            ..DomGraphics::default()
        }]);
        let model = if let Some(video) = &devices.video {
            VideoModel {
                kind: util::intern(video.r#type.as_deref().unwrap_or_default()),
                vram: Some(DEFAULT_VRAM),
                heads: Some(DEFAULT_HEADS),
                ..VideoModel::default()
            }
        } else {
            match self.env.arch {
                Arch::Amd64 if self.env.ctx.bochs_for_efi_guests && util::is_efi(vmi) => {
                    VideoModel {
                        kind: "bochs".into(),
                        heads: Some(DEFAULT_HEADS),
                        ..VideoModel::default()
                    }
                }
                Arch::Amd64 => VideoModel {
                    kind: "vga".into(),
                    heads: Some(DEFAULT_HEADS),
                    vram: Some(DEFAULT_VRAM),
                    ..VideoModel::default()
                },
                Arch::Arm64 | Arch::S390x => VideoModel {
                    kind: "virtio".into(),
                    heads: Some(DEFAULT_HEADS),
                    ..VideoModel::default()
                },
            }
        };
        domain.devices.video = Few::from([Video { model }]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{element, node, run, vmi};
    use crate::context::ConverterContext;
    use serde_json::{Value, json};

    fn graphics_of(spec: Value, ctx: &ConverterContext) -> Domain {
        let vmi = vmi(spec);
        let env = Env::new(&vmi, ctx);
        run(&Graphics { env: &env }, &vmi).expect("configures")
    }

    fn video(spec: Value, ctx: &ConverterContext) -> VideoModel {
        let d = graphics_of(spec, ctx);
        d.devices
            .video
            .first()
            .expect("a video device")
            .model
            .clone()
    }

    fn efi_spec() -> Value {
        json!({"domain": {"devices": {}, "firmware": {"bootloader": {"efi": {}}}}})
    }

    #[test]
    fn nothing_is_attached_when_autoattach_is_false_on_any_architecture() {
        let spec = json!({"domain": {"devices": {"autoattachGraphicsDevice": false}}});
        for arch in [Arch::Amd64, Arch::Arm64, Arch::S390x] {
            let d = graphics_of(spec.clone(), &node(arch));
            assert!(d.devices.graphics.is_empty() && d.devices.video.is_empty());
        }
    }

    #[test]
    fn vnc_listens_on_a_socket_under_the_vmis_private_directory() {
        let d = graphics_of(
            json!({"domain": {"devices": {}}}),
            &ConverterContext::default(),
        );
        insta::assert_snapshot!(element(&d, "graphics"), @r#"
        <graphics type="vnc">
        	<listen type="socket" socket="/var/run/kubevirt-private/u1/virt-vnc"/>
        </graphics>
        "#);
    }

    #[test]
    fn the_default_video_is_vga_on_amd64_and_virtio_elsewhere() {
        let plain = json!({"domain": {"devices": {}}});
        let model = |arch| {
            let v = video(plain.clone(), &node(arch));
            (v.kind.to_string(), v.vram, v.heads)
        };
        assert_eq!(
            model(Arch::Amd64),
            ("vga".to_string(), Some(16384), Some(1))
        );
        assert_eq!(model(Arch::Arm64), ("virtio".to_string(), None, Some(1)));
        assert_eq!(model(Arch::S390x), ("virtio".to_string(), None, Some(1)));
    }

    #[test]
    fn efi_guests_on_amd64_get_bochs_when_the_cluster_says_so() {
        let bochs = video(efi_spec(), &ConverterContext::default());
        assert_eq!(
            (bochs.kind.as_ref(), bochs.vram, bochs.heads),
            ("bochs", None, Some(1))
        );
        let no_bochs = ConverterContext {
            bochs_for_efi_guests: false,
            ..ConverterContext::default()
        };
        assert_eq!(video(efi_spec(), &no_bochs).kind, "vga");
        // Only EFI guests.
        let bios = json!({"domain": {"devices": {}}});
        assert_eq!(video(bios, &ConverterContext::default()).kind, "vga");
    }

    #[test]
    fn a_video_type_in_the_vmi_wins_with_the_default_vram_on_every_architecture() {
        let spec = json!({"domain": {"devices": {"video": {"type": "virtio"}},
            "firmware": {"bootloader": {"efi": {}}}}});
        for arch in [Arch::Amd64, Arch::Arm64, Arch::S390x] {
            for bochs_for_efi_guests in [true, false] {
                let ctx = ConverterContext {
                    bochs_for_efi_guests,
                    ..node(arch)
                };
                let v = video(spec.clone(), &ctx);
                assert_eq!(
                    (v.kind.as_ref(), v.vram, v.heads),
                    ("virtio", Some(16384), Some(1))
                );
            }
        }
    }

    #[test]
    fn cross_architecture_emulation_attaches_no_graphics() {
        let ctx = ConverterContext {
            allow_cross_arch_emulation: true,
            ..ConverterContext::default()
        };
        let d = graphics_of(json!({"domain": {"devices": {}}}), &ctx);
        assert!(d.devices.graphics.is_empty() && d.devices.video.is_empty());
    }
}
