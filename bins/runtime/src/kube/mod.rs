//! The cluster side of the shell (feature `kube`): the kube-rs implementation of [`Api`](crate::Api),
//! watchers feeding caches and the observer, leader election on a Lease, and the metrics and
//! health endpoints every kvrs daemon serves, and the client and logging set-up they share.

pub mod api;
pub mod lease;
pub mod serve;
pub mod setup;
