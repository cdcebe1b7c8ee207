//! The calls the launcher makes to libvirt, in the launcher's terms.
//!
//! The launcher code goes through this trait only, so the client behind it can change without
//! touching the launcher: [`super::XdrClient`] speaks libvirt's remote protocol itself, and a
//! client over libvirt.so (the `virt` crate) was measured behind it (see `mod.rs`).
//! [`super::Connection`] names the one compiled in. Static dispatch (no `dyn`): one client is
//! built into a launcher binary, and async trait methods stay plain.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{
    DiskError, DomainInfo, DomainRef, Event, JobStats, LibvirtError, TypedParam, WireParam,
};

/// A connection to the pod's libvirt daemon. Every future is `Send`: the launcher drives calls
/// from spawned tasks.
pub trait Libvirt: Send + Sync + 'static {
    /// Connects to `socket` and opens `uri` (`qemu:///session` or `qemu:///system`). Events go
    /// to the returned receiver once [`Libvirt::register_lifecycle_events`] (and
    /// [`Libvirt::register_agent_events`]) ran.
    fn open(
        socket: &Path,
        uri: &str,
    ) -> impl Future<Output = Result<(Arc<Self>, mpsc::UnboundedReceiver<Event>), LibvirtError>> + Send
    where
        Self: Sized;
    /// Subscribes to lifecycle events of every domain.
    fn register_lifecycle_events(&self) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// Subscribes to guest-agent connect/disconnect events of every domain.
    fn register_agent_events(&self) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// `virDomainGetGuestInfo` for the `types` bits ([`super::guest_info`]): typed parameters
    /// (`os.name`, `if.0.addr.0.addr`, ...).
    fn guest_info(
        &self,
        d: &DomainRef,
        types: u32,
    ) -> impl Future<Output = Result<Vec<TypedParam>, LibvirtError>> + Send;
    /// `virDomainQemuAgentCommand`: a raw guest-agent command and the agent's JSON answer.
    fn agent_command(
        &self,
        d: &DomainRef,
        command: &str,
    ) -> impl Future<Output = Result<String, LibvirtError>> + Send;
    /// The hypervisor (QEMU) version: major * 1e6 + minor * 1e3 + micro.
    fn hypervisor_version(&self) -> impl Future<Output = Result<u64, LibvirtError>> + Send;
    /// The domain capabilities XML of the default emulator for `arch`; the first call makes
    /// libvirt probe that QEMU, which a later define reuses.
    fn domain_capabilities(
        &self,
        arch: &str,
    ) -> impl Future<Output = Result<String, LibvirtError>> + Send;
    /// Defines (or redefines) a persistent domain.
    fn define_xml(&self, xml: &str)
    -> impl Future<Output = Result<DomainRef, LibvirtError>> + Send;
    /// Looks a domain up by name.
    fn lookup(&self, name: &str) -> impl Future<Output = Result<DomainRef, LibvirtError>> + Send;
    /// Starts a defined domain.
    fn create(&self, d: &DomainRef) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// Powers the domain off at once.
    fn destroy(&self, d: &DomainRef) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// Asks the guest to shut down (ACPI power button).
    fn shutdown(&self, d: &DomainRef) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// Pauses the vCPUs.
    fn suspend(&self, d: &DomainRef) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// Resumes the vCPUs.
    fn resume(&self, d: &DomainRef) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// Asks the guest to reboot the way `flags` says (`virDomainRebootFlagValues`).
    fn reboot(
        &self,
        d: &DomainRef,
        flags: u32,
    ) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// Hard reset.
    fn reset(&self, d: &DomainRef) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// `virDomainFSFreeze` of every mounted filesystem: the number frozen.
    fn fs_freeze(&self, d: &DomainRef) -> impl Future<Output = Result<i32, LibvirtError>> + Send;
    /// `virDomainFSThaw` of every frozen filesystem: the number thawed.
    fn fs_thaw(&self, d: &DomainRef) -> impl Future<Output = Result<i32, LibvirtError>> + Send;
    /// Removes the definition; its NVRAM file stays (KubeVirt's `KEEP_NVRAM`).
    fn undefine(&self, d: &DomainRef) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// `(virDomainState, reason)`.
    fn state(&self, d: &DomainRef)
    -> impl Future<Output = Result<(i32, i32), LibvirtError>> + Send;
    /// The disks whose last IO failed (`virDomainGetDiskErrors`).
    fn disk_errors(
        &self,
        d: &DomainRef,
    ) -> impl Future<Output = Result<Vec<DiskError>, LibvirtError>> + Send;
    /// The live (or inactive) domain XML.
    fn xml_desc(&self, d: &DomainRef) -> impl Future<Output = Result<String, LibvirtError>> + Send;
    /// Basic counters.
    fn info(&self, d: &DomainRef) -> impl Future<Output = Result<DomainInfo, LibvirtError>> + Send;
    /// The domain XML with `VIR_DOMAIN_XML_MIGRATABLE`: what a migration's destination may be
    /// given.
    fn migratable_xml(
        &self,
        d: &DomainRef,
    ) -> impl Future<Output = Result<String, LibvirtError>> + Send;
    /// `virDomainMigrateToURI3` for a peer-to-peer migration; returns when it ended or failed.
    fn migrate_perform3_params(
        &self,
        d: &DomainRef,
        dconnuri: &str,
        params: &[WireParam],
        flags: u32,
    ) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// `virDomainGetJobStats`: the job type and its counters.
    fn job_stats(
        &self,
        d: &DomainRef,
    ) -> impl Future<Output = Result<JobStats, LibvirtError>> + Send;
    /// `virDomainGetJobInfo`'s job type only (`VIR_DOMAIN_JOB_*`).
    fn job_type(&self, d: &DomainRef) -> impl Future<Output = Result<i32, LibvirtError>> + Send;
    /// `virDomainAbortJob`.
    fn abort_job(&self, d: &DomainRef) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// `virDomainMigrateSetMaxDowntime` in milliseconds.
    fn migrate_set_max_downtime(
        &self,
        d: &DomainRef,
        ms: u64,
    ) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// `virDomainMigrateStartPostCopy`.
    fn migrate_start_post_copy(
        &self,
        d: &DomainRef,
    ) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// `virDomainAttachDeviceFlags`: adds the device `xml` describes (a hotplugged disk), where
    /// `flags` (`virDomainDeviceModifyFlags`) say: the running guest, the definition, or both.
    fn attach_device(
        &self,
        d: &DomainRef,
        xml: &str,
        flags: u32,
    ) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// `virDomainDetachDeviceFlags`: removes the device `xml` describes.
    fn detach_device(
        &self,
        d: &DomainRef,
        xml: &str,
        flags: u32,
    ) -> impl Future<Output = Result<(), LibvirtError>> + Send;
    /// Closes the connection politely.
    fn close(&self) -> impl Future<Output = ()> + Send;
}
