//! The VMI controller decision (KubeVirt's `pkg/virt-controller/watch/vmi`), written in the modules below.

pub mod state;
