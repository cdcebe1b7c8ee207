//! The cluster side of the shell (feature `kube`): the kube-rs implementation of [`Api`](crate::Api),
//! watchers feeding caches and the observer, leader election on a Lease, and the metrics and
//! health endpoints every kvrs daemon serves, the KubeVirt CR's live configuration, and the client
//! and logging set-up they share.

pub mod api;
pub mod kubevirt_config;
pub mod lease;
pub mod serve;
pub mod setup;
