//! The cluster side of the shell (feature `kube`): the kube-rs implementation of [`Api`](crate::Api)
//! and the controllers' effects over it, leader election on a Lease, and the metrics and
//! health endpoints every kvrs daemon serves, the KubeVirt CR's live configuration, and the client
//! and logging set-up, `main` and metrics they share ([`daemon`]).

pub mod api;
pub mod controller;
pub mod core_events;
pub mod daemon;
pub mod go_patch;
pub mod https;
pub mod kubevirt_config;
pub mod lease;
pub mod serve;
pub mod setup;
pub mod update;
