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
//! - [`hooks::HookClient`]: the launcher's client of KubeVirt's hook sidecars (`Info` handshake,
//!   `Callbacks` v1alpha1-v1alpha3).
//! - [`layout`]: where the sockets live in the pod and on the node.
//! - [`transport`]: dialling and serving on Unix sockets with rename-on-ready.
//!
//! ## Talking to a launcher
//!
//! virt-handler finds a launcher's socket through the pod's UID ([`layout`]), connects with
//! [`LauncherClient::connect`] (which negotiates the protocol version, as KubeVirt's client does)
//! and sends the VMI with [`VirtualMachineOptions`], the cluster facts the launcher cannot read
//! from the VMI. Every call runs under virt-handler's deadline for it ([`ClientConfig`]) and fails
//! with a typed [`IpcError`].
//!
//! ```
//! use std::path::Path;
//! use std::time::Duration;
//! use kvrs_ipc::proto::cmd::v1::ClusterConfig;
//! use kvrs_ipc::{ClientConfig, IpcError, LauncherClient, VirtualMachineOptions, layout};
//!
//! let socket = layout::launcher_socket_on_host(Path::new("/var/lib/kubelet/pods"), "6d1c")?;
//! assert_eq!(
//!     socket,
//!     Path::new("/var/lib/kubelet/pods/6d1c/volumes/kubernetes.io~empty-dir/sockets/launcher-sock"),
//! );
//! // A UID that would leave the pods directory is refused.
//! assert!(layout::launcher_socket_on_host(Path::new("/var/lib/kubelet/pods"), "..").is_err());
//!
//! let options = VirtualMachineOptions {
//!     mem_balloon_stats_period: 10,
//!     cluster_config: Some(ClusterConfig { serial_console_log_disabled: true, ..Default::default() }),
//!     ..Default::default()
//! };
//! // `SyncVirtualMachine` carries a VMI: it runs under virt-handler's long deadline.
//! assert_eq!(ClientConfig::default().long_timeout, Duration::from_secs(20));
//!
//! // Connecting needs a launcher serving on that socket, so the example defines this function
//! // (the compiler checks it) without calling it.
//! async fn sync(socket: &Path, vmi: &kvrs_api::VirtualMachineInstance,
//!               options: VirtualMachineOptions) -> Result<(), IpcError> {
//!     let launcher = LauncherClient::connect(socket).await?;
//!     launcher.ping().await?;
//!     launcher.sync_vmi(vmi, options).await
//! }
//! # let _ = sync;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(unreachable_pub)]

pub mod client;
pub mod error;
pub mod hooks;
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
