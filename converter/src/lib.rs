//! kvrs-converter: KubeVirt VMI to libvirt domain XML, the same as KubeVirt v1.9.0's converter.

pub mod domain;
pub mod xmltree;
