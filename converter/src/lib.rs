//! kvrs-converter: a KubeVirt VMI into the libvirt domain KubeVirt v1.9.0's virt-launcher defines
//! for it, byte for byte.
//!
//! [`convert`] takes the VMI and a [`ConverterContext`] and returns the [`Domain`];
//! [`Domain::to_xml`] writes the XML the launcher hands to libvirt ([`convert_to_xml`] does both).
//! A VMI that cannot become a domain gives a [`ConvertError`] naming the VMI field at fault.
//!
//! ```
//! use kvrs_converter::{ConverterContext, convert};
//!
//! let vmi: kvrs_api::VirtualMachineInstance = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
//!     "spec": {
//!         "domain": {
//!             "cpu": {"cores": 2},
//!             "resources": {"requests": {"memory": "1Gi"}},
//!             "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}
//!         },
//!         "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora"}}]
//!     }
//! }))?;
//! let domain = convert(&vmi, &ConverterContext::default())?;
//! assert_eq!(domain.name, "default_vm");
//! assert_eq!(domain.vcpu.as_ref().map(|v| v.cpus), Some(2));
//! assert_eq!(domain.devices.disks[0].target.dev.as_deref(), Some("vda"));
//!
//! let xml = domain.to_xml()?;
//! assert!(xml.starts_with(r#"<domain type="kvm" xmlns:qemu="#));
//! println!("{xml}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The host is described by the context, never looked at: on a node without `/dev/kvm` the
//! domain is emulated, or refused when the cluster does not allow emulation.
//!
//! ```
//! # use kvrs_converter::{ConverterContext, convert};
//! # let vmi: kvrs_api::VirtualMachineInstance = serde_json::from_value(serde_json::json!({
//! #     "metadata": {"name": "vm", "namespace": "default"},
//! #     "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}
//! # }))?;
//! let no_kvm = ConverterContext {
//!     hypervisor_device_available: false,
//!     ..ConverterContext::default()
//! };
//! assert_eq!(convert(&vmi, &no_kvm)?.kind, "qemu");
//!
//! let no_emulation = ConverterContext { allow_emulation: false, ..no_kvm };
//! let err = convert(&vmi, &no_emulation).unwrap_err();
//! assert_eq!(err.to_string(), "spec: kvm not present and emulation is not allowed");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What goes in
//!
//! The VMI is `kvrs_api::VirtualMachineInstance` (a binary using it also picks the Kubernetes API
//! version with a `k8s-openapi` feature, e.g. `v1_34`). KubeVirt converts the VMI the API server
//! stored: defaulted and validated. Run a VMI through
//! `kvrs-admission` first (`kvrs_admission::admit`) to get the domain a cluster would get;
//! [`convert`] also takes VMIs that were never admitted (it checks again what would make it write
//! outside the launcher's directories or allocate without bound), but their domain is only as
//! KubeVirt-like as the VMI is.
//!
//! # Why it is shaped like this
//!
//! - **A pure function of VMI and context.** KubeVirt's launcher gathers host facts (KVM device,
//!   block volumes, firmware files, prepared host devices, cluster settings) into a context before
//!   it converts. Here [`ConverterContext`] is the only way they enter, so a conversion is
//!   reproducible and testable anywhere. Its [`Default`] is the context KubeVirt's oracle corpus
//!   was recorded with, and the conformance tests (`kvrs-tests`' `oracle_convert`) compare the
//!   whole corpus against it.
//! - **One configurator per part of the domain, in KubeVirt's order.** Each file under
//!   `src/configurators/` is named after the device or section it writes, as KubeVirt's are, and
//!   carries its own tests; one list fixes their order. Disks and volumes, memory backing,
//!   dedicated-CPU pinning and the libvirt defaults follow. They are not public: what users need
//!   is the whole conversion, and the steps change when KubeVirt's do.
//! - **A model shaped like KubeVirt's `api.DomainSpec`.** [`domain`] has KubeVirt's element
//!   names and child order, because Go's `encoding/xml` writes children in field order and the
//!   output is compared byte for byte. The XML writer is generated from the same serde attributes
//!   that parse it (`kvrs-converter-xml-derive`), so names exist once. [`Domain::from_xml`] reads
//!   libvirt's own XML back.
//!
//! # Also here
//!
//! - [`gojson`]: the domain as Go's `api.Domain` JSON, the payload virt-launcher sends to
//!   virt-handler.
//! - [`xmltree::diff`]: two domain XMLs compared as trees (the rules of KubeVirt's comparison
//!   corpus), for tests that check conformance.
//! - [`check_rendered_interfaces`]: the interfaces KubeVirt leaves out of the domain (SR-IOV
//!   without a prepared device, binding plugins), for tools that print a domain to a user.
//! - [`topology::vcpu_count`]: the vCPUs a VMI asks for, as the converter counts them.

#![warn(unreachable_pub)]

mod configurators;
pub mod context;
mod cpu_pool;
mod dedicated;
mod disks;
pub mod domain;
mod error;
pub mod gojson;
mod iothreads;
mod memory_backing;
pub mod topology;
pub mod xmltree;

pub use configurators::{
    AttachedElsewhere, UnrenderedInterface, check_rendered_interfaces,
    domain_attachment_by_interface_name,
};
pub use context::{Arch, ConverterContext};
pub use domain::Domain;
pub use error::ConvertError;

use configurators::{Env, util};
use kvrs_api::VirtualMachineInstance;

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
