//! The VM controller decision (KubeVirt's `pkg/virt-controller/watch/vm`), written in the modules below.
