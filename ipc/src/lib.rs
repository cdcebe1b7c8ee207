//! kvrs-ipc: virt-handler <-> virt-launcher gRPC on Unix sockets, wire-compatible with KubeVirt
//! v1.9.0.
//!
//! - [`proto`]: the generated messages and raw tonic stubs of `kubevirt.cmd.v1`,
//!   `kubevirt.cmd.info`, `kubevirt.notify.v1`, `kubevirt.notify.info` (kvrs's own .proto files
//!   under `ipc/proto/`, same names and field numbers as KubeVirt's), and the kubelet's
//!   device-plugin API `v1beta1` ([`proto::deviceplugin::v1beta1`]) virt-handler serves.
//! - [`LauncherClient`] (handler -> launcher) and [`LauncherService`] + [`serve_launcher`]
//!   (the launcher's side).
//! - [`NotifyClient`] (launcher -> handler) and [`NotifyService`] + [`serve_notify`]
//!   (the handler's side), with [`serve_notify_pipe`] bridging the pod's pipe socket.
//! - [`layout`]: where the sockets live in the pod and on the node.
//! - [`transport`]: dialling and serving on Unix sockets with rename-on-ready.

pub mod client;
pub mod error;
pub mod layout;
pub mod notify;
pub mod pipe;
pub mod proto;
pub mod server;
pub mod transport;
pub mod version;

pub use client::LauncherClient;
pub use error::IpcError;
pub use notify::{DomainEvent, NotifyClient, NotifyService, serve_notify};
pub use pipe::{PipeHandle, serve_notify_pipe};
pub use proto::cmd::v1::VirtualMachineOptions;
pub use server::{
    CmdError, CmdResult, ExecOutput, LauncherService, Screenshot, VmiCommand, serve_launcher,
};
pub use transport::{ClientConfig, ServeOptions, ServerHandle};

/// tonic itself, for [`tonic::Status`] in [`CmdError::Status`] and the raw generated stubs.
pub use tonic;
/// Implement [`LauncherService`] and [`NotifyService`] with this attribute
/// (`#[kvrs_ipc::async_trait]`), so implementors need no direct tonic dependency.
pub use tonic::async_trait;
