//! `<graphics>` (VNC on a socket) and `<video>`.

use super::{Configurator, Env, util};
use crate::context::Arch;
use crate::domain::{Domain, Few, Graphics as DomGraphics, GraphicsListen, Video, VideoModel};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

const DEFAULT_HEADS: u32 = 1;
const DEFAULT_VRAM: u32 = 16384;

/// Writes VNC graphics and the video device.
pub struct Graphics<'a> {
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
