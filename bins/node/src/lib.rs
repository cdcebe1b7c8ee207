//! # kvrs-node
//!
//! The node side of kvrs's virt-handler: the privileged preparation KubeVirt's handler does
//! *outside* a VM's pod before the first `SyncVirtualMachine`:
//!
//! * [`network`]: the pod network — masquerade (bridge + tap + NAT), bridge binding and
//!   `managedTap` binding plugins — built inside the pod's network namespace from a dedicated
//!   thread;
//! * [`claim_devices`]: `/dev/kvm`, `/dev/net/tun`, `/dev/vhost-net` handed to QEMU's user;
//! * [`check_container_disks`]: each container disk is where the launcher will look;
//! * [`host_devices`]: whether KVM really works here and which device nodes exist;
//! * [`hotplug`]: hotplugged volumes mounted into (and removed from) a running launcher pod.
//!
//! The handler finds the pod with [`launcher_pid_of_socket`] and [`PodRef::of_pid`]. Everything
//! here needs root on the node (`CAP_SYS_ADMIN`, `CAP_NET_ADMIN`, `CAP_CHOWN`) and, for the
//! network, the `ip` and `nft` binaries.

mod container_disk;
mod devices;
mod error;
pub mod host_devices;
pub mod hotplug;
pub mod network;
mod pod;
mod safepath;

pub use container_disk::{
    DISK_FALLBACK_DIR, IMAGE_VOLUME_DIR, INIT_CONTAINER_DISK_DIR, check_container_disks,
};
pub use devices::{QEMU_UID, claim_devices};
pub use error::NodeError;
pub use network::{NetSetup, setup_pod_network};
pub use pod::{PodRef, launcher_pid_of_socket};
