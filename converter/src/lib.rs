//! kvrs-converter: KubeVirt VMI to libvirt domain XML, the same as KubeVirt v1.9.0's converter.
//!
//! ```
//! use kvrs_converter::{convert, ConverterContext};
//! let vmi: kvrs_api::VirtualMachineInstance = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
//!     "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}
//! })).unwrap();
//! let domain = convert(&vmi, &ConverterContext::default()).unwrap();
//! assert_eq!(domain.name, "default_vm");
//! assert_eq!(domain.memory.value, 64 * 1024 * 1024);
//! let xml = domain.to_xml().unwrap();
//! assert!(xml.contains("<name>default_vm</name>"));
//! ```

pub mod configurators;
pub mod context;
pub mod cpu_pool;
mod dedicated;
pub mod disks;
pub mod domain;
mod error;
pub mod gojson;
pub mod iothreads;
mod memory_backing;
pub mod topology;
pub mod xmltree;

pub use configurators::{
    AttachedElsewhere, Configurator, Env, UnrenderedInterface, check_rendered_interfaces,
};
pub use context::{Arch, ConverterContext};
pub use domain::Domain;
pub use error::ConvertError;

use configurators::util;
use kvrs_api::VirtualMachineInstance;

impl<'a> Env<'a> {
    /// Derives the per-conversion environment from VMI and context.
    pub fn new(vmi: &VirtualMachineInstance, ctx: &'a ConverterContext) -> Env<'a> {
        let guest = vmi.spec.architecture.as_deref().and_then(Arch::parse);
        let arch = match guest {
            Some(g) if ctx.allow_cross_arch_emulation && g != ctx.architecture => g,
            _ => ctx.architecture,
        };
        let transitional = vmi.spec.domain.devices.use_virtio_transitional == Some(true);
        let virtio_model = match (arch, transitional) {
            (Arch::S390x, _) => "virtio",
            (_, true) => "virtio-transitional",
            (_, false) => "virtio-non-transitional",
        };
        let ls = vmi.spec.domain.launch_security.as_ref();
        Env {
            ctx,
            arch,
            virtio_model,
            sev: ls.is_some_and(|l| l.sev.is_some() || l.snp.is_some()),
            tdx: ls.is_some_and(|l| l.tdx.is_some()),
            pv: ls.is_some() && vmi.spec.architecture.as_deref() == Some("s390x"),
        }
    }

    /// The architecture allows disabling the NIC option ROM.
    pub fn rom_tuning(&self) -> bool {
        self.arch != Arch::S390x
    }

    /// SCSI controller model.
    pub fn scsi_model(&self) -> &'static str {
        if self.arch == Arch::S390x {
            "virtio-scsi"
        } else {
            self.virtio_model
        }
    }
}

/// Converts a defaulted VMI into the libvirt domain KubeVirt v1.9.0 would define.
pub fn convert(
    vmi: &VirtualMachineInstance,
    ctx: &ConverterContext,
) -> Result<Domain, ConvertError> {
    // Built where it is returned: a `Domain` is some 3.7 KB, and building it in a local first
    // copied all of it into the `Ok` on the way out.
    let mut out = Ok(Domain::default());
    if let Ok(domain) = &mut out
        && let Err(e) = build(&Env::new(vmi, ctx), vmi, domain)
    {
        return Err(e);
    }
    out
}

/// The configurators, disks and defaults, in KubeVirt's order.
fn build(
    env: &Env<'_>,
    vmi: &VirtualMachineInstance,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    configurators::run_pipeline(env, vmi, domain)?;
    memory_backing::configure(vmi, domain)?;
    disks::convert_disks(env, vmi, domain)?;
    if util::is_cpu_dedicated(vmi) {
        dedicated::adjust(env, vmi, domain)?;
    }
    apply_libvirt_defaults(env, domain);
    Ok(())
}

/// Converts and writes the XML in one go.
pub fn convert_to_xml(
    vmi: &VirtualMachineInstance,
    ctx: &ConverterContext,
) -> Result<String, ConvertError> {
    convert(vmi, ctx)?.to_xml().map_err(|e| match e {
        // The writer names the domain element (e.g. `/domain/devices/disk[2]/serial`).
        domain::XmlError::Write(w) => ConvertError::new(w.location(), w.reason()),
        other => ConvertError::new("", other.to_string()),
    })
}

/// KubeVirt's domain defaulter: qemu namespace, `kvm` type, `hvm` with the arch's machine.
fn apply_libvirt_defaults(env: &Env<'_>, domain: &mut Domain) {
    domain.xmlns_qemu = Some(domain::QEMU_NAMESPACE.into());
    if domain.kind.is_empty() {
        domain.kind = "kvm".into();
    }
    let t = &mut domain.os.kind;
    t.os = "hvm".into();
    if t.arch.is_none() {
        t.arch = Some(env.arch.libvirt_arch().into());
    }
    if t.machine.is_none() {
        t.machine = Some(
            match env.arch {
                Arch::Amd64 => "q35",
                Arch::Arm64 => "virt",
                Arch::S390x => "s390-ccw-virtio",
            }
            .into(),
        );
    }
}
