//! `<memoryBacking>`: hugepages, memfd for virtiofs / passt / hugepages, and the single NUMA cell
//! memfd needs.

use crate::configurators::util;
use crate::domain::{
    Domain, MemoryBacking, MemoryBackingAccess, MemoryBackingSource, Numa, NumaCell,
};
use crate::error::ConvertError;
use crate::topology::{quantity_to_bytes, virtual_memory};
use kvrs_api::VirtualMachineInstance;

/// Annotation opting out of memfd for hugepages.
pub(crate) const MEMFD_ANNOTATION: &str = "kubevirt.io/memfd";

/// Applies the memory backing rules after the configurators ran.
pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let mut memfd = false;
    if vmi
        .spec
        .domain
        .memory
        .as_ref()
        .is_some_and(|m| m.hugepages.is_some())
    {
        domain.memory_backing = Some(MemoryBacking {
            hugepages: Some(Default::default()),
            ..Default::default()
        });
        memfd = util::annotation(vmi, MEMFD_ANNOTATION) != Some("false");
    }
    let devices = &vmi.spec.domain.devices;
    let virtiofs = devices.filesystems.as_ref().is_some_and(|f| !f.is_empty());
    let passt = devices
        .interfaces
        .iter()
        .flatten()
        .any(|i| i.passt_binding.is_some());
    if virtiofs || passt {
        let mb = domain
            .memory_backing
            .get_or_insert_with(MemoryBacking::default);
        mb.access = Some(MemoryBackingAccess {
            mode: "shared".into(),
        });
        memfd = true;
    }
    if memfd {
        let mb = domain
            .memory_backing
            .get_or_insert_with(MemoryBacking::default);
        mb.source = Some(MemoryBackingSource {
            kind: "memfd".into(),
        });
        if domain.cpu.numa.is_none() {
            let bytes = match virtual_memory(vmi) {
                Some(q) => quantity_to_bytes(q, "spec.domain.memory.guest")?,
                None => 0,
            };
            let vcpus = domain.vcpu.as_ref().map(|v| v.cpus).unwrap_or(1);
            domain.cpu.numa = Some(Numa {
                cells: vec![NumaCell {
                    id: "0".into(),
                    cpus: Some(format!("0-{}", vcpus.saturating_sub(1)).into()),
                    memory: Some(bytes / 1024),
                    unit: Some("KiB".into()),
                    ..NumaCell::default()
                }],
            });
        }
    }
    Ok(())
}
