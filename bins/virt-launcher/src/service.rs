//! The `Cmd` service: SyncVirtualMachine and the lifecycle commands, on top of libvirt.
//!
//! Every command that changes the domain runs under one lock, so repeated or concurrent syncs of
//! the same VMI see each other's result (a second sync of a running domain is a no-op).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use kvrs_api::VirtualMachineInstance;
use kvrs_converter::Domain;
use kvrs_ipc::{CmdError, CmdResult, LauncherService, VmiCommand};
use tokio::sync::Mutex;

use crate::agent::{self, AgentStore, Intervals};
use crate::events::Notice;
use crate::flags::Flags;
use crate::fs_freeze::{self, FreezeStatus};
use crate::hooks::HookSidecars;
use crate::libvirt::{Connection, DEVICE_MODIFY_LIVE_AND_CONFIG, DomainRef, Libvirt, LibvirtError};
use crate::state::{AgentStatus, Owner, domain_json};
use crate::{host, hotplug, image_volume, log, network, prestart};

/// `VIR_ERR_OPERATION_INVALID`: e.g. destroying a domain that is not running.
const ERR_OPERATION_INVALID: i32 = 55;

/// The launcher's command handler.
pub struct Launcher {
    conn: Arc<Connection>,
    flags: Flags,
    /// Serialises every domain-changing command.
    lock: Mutex<()>,
    owner: std::sync::Mutex<Owner>,
    /// The VMI's `terminationGracePeriodSeconds` once synced.
    vmi_grace: std::sync::Mutex<Option<u64>>,
    /// What the guest agent reported.
    agent: Arc<AgentStore>,
    /// Paused by the user (`Pause`): a sync leaves such a domain paused, and resumes one
    /// paused for any other reason — an IO error once the disk has room again (KubeVirt's
    /// launcher does the same; virt-handler spaces those syncs out).
    paused_by_user: std::sync::atomic::AtomicBool,
    /// The disk errors read just before a sync resumed a domain paused on an IO error: resuming
    /// clears libvirt's record, and the IOerror event for that pause may not have been sent yet.
    disk_errors: std::sync::Mutex<Vec<crate::libvirt::DiskError>>,
    /// The hook sidecars, which may change the domain XML before each define.
    hooks: Arc<HookSidecars>,
    /// The event forwarder's queue of notifications to the handler (weak: the forwarder ends
    /// when libvirt's connection closes, and this must not keep its queue open).
    notices: std::sync::OnceLock<tokio::sync::mpsc::WeakUnboundedSender<Notice>>,
    /// The pending safety thaw of the last freeze: cancelled by an unfreeze or a new freeze.
    safety_thaw: std::sync::Mutex<Option<tokio::task::AbortHandle>>,
    /// The live migration's metadata (source or target).
    migration: Arc<crate::migration::shell::Tracker>,
}

/// How long a sync waits for the handler to be told that the domain it started runs.
const ANNOUNCE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn failed(what: &str, e: impl std::fmt::Display) -> CmdError {
    CmdError::failed(format!("{what}: {e}"))
}

impl Launcher {
    /// A handler for the VMI named in the flags.
    pub fn new(
        conn: Arc<Connection>,
        flags: Flags,
        agent: Arc<AgentStore>,
        hooks: Arc<HookSidecars>,
    ) -> Launcher {
        let owner = Owner {
            namespace: flags.namespace.clone(),
            name: flags.name.clone(),
            uid: flags.uid.clone(),
            grace: None,
            migration: None,
        };
        Launcher {
            conn,
            flags,
            lock: Mutex::new(()),
            owner: std::sync::Mutex::new(owner),
            vmi_grace: std::sync::Mutex::new(None),
            paused_by_user: std::sync::atomic::AtomicBool::new(false),
            disk_errors: std::sync::Mutex::new(Vec::new()),
            notices: std::sync::OnceLock::new(),
            safety_thaw: std::sync::Mutex::new(None),
            migration: Arc::default(),
            agent,
            hooks,
        }
    }

    /// Connects the event forwarder's notification queue (see [`Launcher::announce_state`]).
    pub(crate) fn attach_notices(&self, queue: &tokio::sync::mpsc::UnboundedSender<Notice>) {
        let _ = self.notices.set(queue.downgrade());
        self.migration.attach(queue);
    }

    /// Tells the handler the domain's current state through the ordered notification queue and
    /// waits (at most [`ANNOUNCE_WAIT`]) until it has been sent, so that the reply to the sync
    /// that started the domain never reaches the handler before the news that it runs.
    ///
    /// Why: the domain was defined before it was started, and its ADDED notification says
    /// "Shutoff". libvirt's start event travels to the handler on its own path; were the sync's
    /// reply to overtake it, the handler's next sync would see a VMI that is not final beside an
    /// inactive domain — which KubeVirt's rules delete, taking the pod's network cache with it.
    async fn announce_state(&self) {
        let Some(queue) = self.notices.get().and_then(|q| q.upgrade()) else {
            return;
        };
        let (done, sent) = tokio::sync::oneshot::channel();
        if queue.send(Notice::Refresh(Some(done))).is_err() {
            return;
        }
        drop(queue);
        if tokio::time::timeout(ANNOUNCE_WAIT, sent).await.is_err() {
            log::warn(format_args!(
                "the handler was not told within {ANNOUNCE_WAIT:?} that the domain runs; replying anyway"
            ));
        }
    }

    /// The guest agent's data.
    pub fn agent(&self) -> &Arc<AgentStore> {
        &self.agent
    }

    /// The poll intervals the flags ask for (KubeVirt's defaults otherwise).
    pub fn agent_intervals(&self) -> Intervals {
        let d = Intervals::default();
        let f = &self.flags;
        Intervals {
            sys: f.qemu_agent_sys_interval.unwrap_or(d.sys),
            file: f.qemu_agent_file_interval.unwrap_or(d.file),
            user: f.qemu_agent_user_interval.unwrap_or(d.user),
            version: f.qemu_agent_version_interval.unwrap_or(d.version),
            fs_freeze: f.qemu_fsfreeze_status_interval.unwrap_or(d.fs_freeze),
        }
    }

    /// The agent's part of a domain event: OS, interfaces and freeze state.
    pub fn agent_status(&self) -> AgentStatus {
        let d = self.agent.snapshot();
        AgentStatus {
            os_info: d.os,
            interfaces: d.interfaces,
            fs_freeze: d.fs_freeze,
        }
    }

    /// Who the domain belongs to (for events).
    pub fn owner(&self) -> Owner {
        let mut owner = self.owner.lock().map(|o| o.clone()).unwrap_or_default();
        owner.migration = self.migration.snapshot();
        owner
    }

    /// The disk errors a sync kept before resuming (see [`Launcher::sync_vmi`]), once.
    pub fn take_disk_errors(&self) -> Vec<crate::libvirt::DiskError> {
        self.disk_errors
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }

    /// `<namespace>_<name>`: KubeVirt's domain name.
    pub fn domain_name(&self) -> String {
        let o = self.owner();
        format!("{}_{}", o.namespace, o.name)
    }

    /// How long the guest gets to shut down on SIGTERM: the VMI's termination grace period, or
    /// else the launcher's (which KubeVirt sets 15 s longer than the VMI's, so the launcher can
    /// still destroy the guest before its own deadline).
    pub fn guest_grace(&self) -> std::time::Duration {
        let vmi = self.vmi_grace.lock().ok().and_then(|g| *g);
        std::time::Duration::from_secs(
            vmi.unwrap_or(self.flags.grace_period_seconds.saturating_sub(15)),
        )
    }

    /// The domain if it exists.
    async fn find(&self) -> CmdResult<Option<DomainRef>> {
        match self.conn.lookup(&self.domain_name()).await {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(failed("look up domain", e)),
        }
    }

    /// Checks the VMI is the one this launcher serves and records its identity.
    fn adopt(&self, vmi: &VirtualMachineInstance) -> CmdResult {
        let name = vmi.metadata.name.clone().unwrap_or_default();
        let namespace = vmi.metadata.namespace.clone().unwrap_or_default();
        if name.is_empty() || namespace.is_empty() {
            return Err(CmdError::failed("the VMI has no name or namespace"));
        }
        let mut owner = self
            .owner
            .lock()
            .map_err(|_| CmdError::failed("launcher state poisoned"))?;
        if (!owner.name.is_empty() && owner.name != name)
            || (!owner.namespace.is_empty() && owner.namespace != namespace)
        {
            return Err(CmdError::failed(format!(
                "this launcher serves {}/{}, not {namespace}/{name}",
                owner.namespace, owner.name
            )));
        }
        owner.name = name;
        owner.namespace = namespace;
        if let Some(uid) = vmi.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
            owner.uid = uid.to_string();
        }
        // KubeVirt's default grace period is 30 s when the VMI sets none.
        let seconds = vmi.spec.termination_grace_period_seconds.unwrap_or(30);
        owner
            .grace
            .get_or_insert_with(Default::default)
            .deletion_grace_period_seconds = seconds;
        if let (Ok(mut g), Some(secs)) = (
            self.vmi_grace.lock(),
            vmi.spec.termination_grace_period_seconds,
        ) {
            *g = Some(u64::try_from(secs).unwrap_or(0));
        }
        Ok(())
    }

    async fn convert(&self, cmd: &VmiCommand) -> CmdResult<Domain> {
        let ctx = host::converter_context(&cmd.vmi, &cmd.options, &self.flags)
            .await
            .map_err(CmdError::Failed)?;
        let mut domain = kvrs_converter::convert(&cmd.vmi, &ctx)
            .map_err(|e| failed("convert VMI to domain", e))?;
        // KubeVirt's converter leaves out a hotplugged disk until its volume is in the pod.
        hotplug::drop_unmounted(&mut domain, &hotplug::attachable_volumes(&cmd.vmi));
        domain.metadata.kubevirt.uid = self.owner().uid;
        Ok(domain)
    }

    /// Defines the domain: its XML, passed through the hook sidecars (KubeVirt's
    /// OnDefineDomain; what they return is defined as it came), then libvirt's define. A failing
    /// hook fails here, before libvirt sees anything, so no half-edited domain is ever defined.
    /// Returns the domain and when its define was sent.
    pub(crate) async fn define(
        &self,
        vmi: &VirtualMachineInstance,
        wanted: &Domain,
    ) -> CmdResult<(DomainRef, Instant)> {
        let xml = wanted.to_xml().map_err(|e| failed("write domain XML", e))?;
        let xml = self
            .hooks
            .on_define_domain(vmi, &wanted.name, xml)
            .await
            .map_err(|e| failed(&format!("OnDefineDomain hook ({})", e.label()), e))?;
        // KubeVirt's launcher logs the same line: what was defined, for reading (and for
        // benches/compare-launchers.sh, which defines it again on a bare libvirt).
        log::info(format_args!(
            "Domain XML generated. Base64 dump {}",
            base64::engine::general_purpose::STANDARD.encode(&xml)
        ));
        let sent = Instant::now();
        let dom = self
            .conn
            .define_xml(&xml)
            .await
            .map_err(|e| failed("define domain", e))?;
        log::info(format_args!("Domain defined: {}", dom.name));
        Ok((dom, sent))
    }

    /// A running domain gets what KubeVirt changes live: hotplugged disks (`syncDisks`). The
    /// domain's disks are diffed against the new conversion ([`hotplug::changes`]); removed
    /// hotplug disks are detached first, then new ones attached once their file or device is in
    /// the pod. Every other disk is left alone, as KubeVirt's launcher does.
    ///
    /// A volume virt-handler reported mounted whose source is not there yet is not attached
    /// (the next sync tries again): nothing half-attached is left behind. A change libvirt
    /// refuses fails the sync with libvirt's error, naming the volume.
    async fn sync_running(&self, dom: &DomainRef, wanted: &Domain) -> CmdResult {
        let xml = self
            .conn
            .xml_desc(dom)
            .await
            .map_err(|e| failed("read domain XML", e))?;
        let live = Domain::from_xml(&xml).map_err(|e| failed("parse libvirt's domain XML", e))?;
        let changes = hotplug::changes(&live.devices.disks, &wanted.devices.disks);
        if changes.is_empty() {
            return Ok(());
        }
        let vmi = self.domain_name();
        let fail = |e: hotplug::HotplugError| {
            log::error(format_args!("{vmi}: {e}"));
            CmdError::failed(e.to_string())
        };
        for disk in &changes.detach {
            let volume = hotplug::volume_of(disk).unwrap_or_default().to_string();
            let target = disk.target.dev.as_deref().unwrap_or_default();
            log::info(format_args!(
                "{vmi}: Detaching disk {volume}, target {target}"
            ));
            let device = hotplug::disk_xml(disk).map_err(fail)?;
            self.conn
                .detach_device(dom, &device, DEVICE_MODIFY_LIVE_AND_CONFIG)
                .await
                .map_err(|source| {
                    fail(hotplug::HotplugError::Detach {
                        volume: volume.clone(),
                        source,
                    })
                })?;
        }
        for disk in &changes.attach {
            let volume = hotplug::volume_of(disk).unwrap_or_default().to_string();
            let target = disk.target.dev.as_deref().unwrap_or_default();
            let source = hotplug::backend_path(disk).unwrap_or_default();
            if !hotplug::source_ready(&volume, Path::new(source)).map_err(fail)? {
                log::warn(format_args!(
                    "{vmi}: hotplug volume {volume} is reported mounted but {source} is not there to open; not attached (the next sync tries again)"
                ));
                continue;
            }
            log::info(format_args!(
                "{vmi}: Attaching disk {volume}, target {target}"
            ));
            let mut disk = disk.clone();
            let facts = hotplug::source_facts(Path::new(source));
            hotplug::set_cache_and_io(&mut disk, facts).map_err(fail)?;
            let driver = disk.driver.as_ref();
            log::info(format_args!(
                "{vmi}: Driver cache mode for {source} set to {}, IO mode {}",
                driver.and_then(|d| d.cache.as_deref()).unwrap_or_default(),
                driver.and_then(|d| d.io.as_deref()).unwrap_or("default")
            ));
            let device = hotplug::disk_xml(&disk).map_err(fail)?;
            self.conn
                .attach_device(dom, &device, DEVICE_MODIFY_LIVE_AND_CONFIG)
                .await
                .map_err(|source| {
                    fail(hotplug::HotplugError::Attach {
                        volume: volume.clone(),
                        source,
                    })
                })?;
        }
        Ok(())
    }

    /// The guest agent's freeze state of the domain (`guest-fsfreeze-status`).
    async fn freeze_status(&self, dom: &DomainRef) -> CmdResult<Option<FreezeStatus>> {
        let reply = self
            .conn
            .agent_command(dom, fs_freeze::STATUS_COMMAND)
            .await
            .map_err(|e| failed("read the guest's filesystem freeze state", e))?;
        Ok(FreezeStatus::parse(&reply))
    }

    fn cancel_safety_thaw(&self) {
        if let Some(task) = self.safety_thaw.lock().ok().and_then(|mut t| t.take()) {
            task.abort();
        }
    }

    /// In image-volume mode, the VMI's container disks and kernel-boot files as the kubelet
    /// mounted them, linked where the converter looks (a start and a migration target alike).
    fn link_image_volumes(&self, vmi: &VirtualMachineInstance) -> CmdResult {
        if !self.flags.image_volume {
            return Ok(());
        }
        image_volume::link_image_volumes(
            vmi,
            Path::new(image_volume::IMAGE_VOLUME_DIR),
            Path::new(image_volume::KERNEL_BOOT_VOLUME_DIR),
            &self.flags.container_disk_dir,
        )
        .map_err(|e| failed("linking the image volumes", e))
    }

    async fn on_domain<F, Fut>(&self, what: &str, op: F) -> CmdResult
    where
        F: FnOnce(Arc<Connection>, DomainRef) -> Fut,
        Fut: std::future::Future<Output = Result<(), LibvirtError>>,
    {
        let _guard = self.lock.lock().await;
        let Some(dom) = self.find().await? else {
            return Err(CmdError::failed(format!(
                "{what}: domain {} does not exist",
                self.domain_name()
            )));
        };
        op(self.conn.clone(), dom)
            .await
            .map_err(|e| failed(what, e))
    }
}

#[tonic::async_trait]
impl LauncherService for Launcher {
    async fn sync_vmi(&self, cmd: VmiCommand) -> CmdResult {
        let arrived = Instant::now();
        self.adopt(&cmd.vmi)?;
        let _guard = self.lock.lock().await;
        self.link_image_volumes(&cmd.vmi)?;
        // The look-up is a libvirt round trip, the conversion mostly local work: side by side.
        let (wanted, existing) = tokio::join!(self.convert(&cmd), self.find());
        let mut wanted = wanted?;
        let converted = Instant::now();
        if let Some(dom) = existing? {
            let (state, _) = self
                .conn
                .state(&dom)
                .await
                .map_err(|e| failed("read domain state", e))?;
            if state == 3
                && !self
                    .paused_by_user
                    .load(std::sync::atomic::Ordering::SeqCst)
            {
                self.conn
                    .resume(&dom)
                    .await
                    .map_err(|e| failed("unpausing the VirtualMachineInstance failed", e))?;
                log::info(format_args!("Domain unpaused."));
            }
            // running, blocked, paused, shutting down, pm-suspended: live domain
            if matches!(state, 1 | 2 | 3 | 4 | 7) {
                return self.sync_running(&dom, &wanted).await;
            }
        }
        let t0 = Instant::now();
        prestart::prepare(&cmd.vmi, &wanted, &self.flags, &self.hooks)
            .await
            .map_err(CmdError::Failed)?;
        network::setup_phase2(
            &cmd.vmi,
            &cmd.options.interface_domain_attachment,
            &mut wanted,
            &network::dhcp::DhcpEnv::pod(),
        )
        .map_err(|e| failed("preparing the pod network failed", e))?;
        let (dom, t1) = self.define(&cmd.vmi, &wanted).await?;
        let t2 = Instant::now();
        self.conn
            .create(&dom)
            .await
            .map_err(|e| failed("start domain", e))?;
        let t3 = Instant::now();
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1000.0;
        // convert_ms (with the domain look-up), prepare_ms, define_ms and start_ms are each
        // step's own time; define_sent_ms and total_ms count from the Sync's arrival (benches/compare-launchers.sh sets them
        // against libvirt's own times).
        log::info(format_args!(
            "Domain started: {} (sync timings: convert_ms={:.1} prepare_ms={:.1} define_sent_ms={:.1} define_ms={:.1} start_ms={:.1} total_ms={:.1})",
            dom.name,
            ms(arrived, converted),
            ms(t0, t1),
            ms(arrived, t1),
            ms(t1, t2),
            ms(t2, t3),
            ms(arrived, t3)
        ));
        self.announce_state().await;
        Ok(())
    }

    async fn shutdown(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        // The grace period starts with the first graceful shutdown (KubeVirt marks it in the
        // domain's metadata, which the handler reads to know when to kill).
        if let Ok(mut owner) = self.owner.lock() {
            let grace =
                owner
                    .grace
                    .get_or_insert_with(|| kvrs_converter::domain::GracePeriodMetadata {
                        deletion_grace_period_seconds: 30,
                        ..Default::default()
                    });
            if grace.deletion_timestamp.is_none() {
                grace.deletion_timestamp = Some(crate::state::rfc3339_now());
                grace.marked_for_graceful_shutdown = Some(true);
            }
        }
        self.on_domain(
            "shut down domain",
            |c, d| async move { c.shutdown(&d).await },
        )
        .await
    }

    async fn kill(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        let _guard = self.lock.lock().await;
        let Some(dom) = self.find().await? else {
            return Ok(());
        };
        match self.conn.destroy(&dom).await {
            Ok(()) => Ok(()),
            // already off
            Err(LibvirtError::Remote { code, .. }) if code == ERR_OPERATION_INVALID => Ok(()),
            Err(e) => Err(failed("destroy domain", e)),
        }
    }

    async fn delete(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        let _guard = self.lock.lock().await;
        let Some(dom) = self.find().await? else {
            return Ok(());
        };
        self.conn
            .undefine(&dom)
            .await
            .map_err(|e| failed("undefine domain", e))
    }

    async fn pause(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        self.on_domain("pause domain", |c, d| async move { c.suspend(&d).await })
            .await?;
        self.paused_by_user
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    async fn unpause(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        self.on_domain("unpause domain", |c, d| async move { c.resume(&d).await })
            .await?;
        self.paused_by_user
            .store(false, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    async fn freeze(
        &self,
        vmi: VirtualMachineInstance,
        unfreeze_timeout_seconds: i32,
    ) -> CmdResult {
        let _guard = self.lock.lock().await;
        let Some(dom) = self.find().await? else {
            return Err(failed("freeze filesystems", "the domain does not exist"));
        };
        // KubeVirt asks the agent first and fails when it cannot: freezing a guest whose agent
        // does not answer would fail in libvirt anyway, with a vaguer message.
        match self.freeze_status(&dom).await? {
            Some(FreezeStatus::Frozen) => return Ok(()),
            Some(FreezeStatus::Thawed) => {}
            None => {
                return Err(failed(
                    "freeze filesystems",
                    "the guest agent reported no freeze state",
                ));
            }
        }
        if let Some(dir) = fs_freeze::swtpm_state_dir(&vmi) {
            fs_freeze::sync_dir(&dir)
                .map_err(|e| failed(&format!("flush the TPM state in {}", dir.display()), e))?;
        }
        let frozen = self
            .conn
            .fs_freeze(&dom)
            .await
            .map_err(|e| failed("freeze filesystems", e))?;
        log::info(format_args!(
            "froze {frozen} filesystems of {}",
            self.domain_name()
        ));
        self.cancel_safety_thaw();
        if let Some(after) = fs_freeze::safety_thaw_after(unfreeze_timeout_seconds) {
            let (conn, name) = (self.conn.clone(), self.domain_name());
            let task = tokio::spawn(async move {
                tokio::time::sleep(after).await;
                log::warn(format_args!(
                    "no unfreeze for {name} within {after:?}: thawing its filesystems"
                ));
                let thawed = match conn.lookup(&name).await {
                    Ok(dom) => conn.fs_thaw(&dom).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = thawed {
                    log::warn(format_args!("safety thaw of {name}: {e}"));
                }
            });
            if let Ok(mut slot) = self.safety_thaw.lock() {
                *slot = Some(task.abort_handle());
            }
        }
        Ok(())
    }

    async fn unfreeze(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        self.cancel_safety_thaw();
        let _guard = self.lock.lock().await;
        let Some(dom) = self.find().await? else {
            return Err(failed("unfreeze filesystems", "the domain does not exist"));
        };
        // Thawing a thawed guest would run its thaw hooks again; an unknown state is thawed
        // anyway, as KubeVirt does.
        if let Ok(Some(FreezeStatus::Thawed)) = self.freeze_status(&dom).await {
            return Ok(());
        }
        self.conn
            .fs_thaw(&dom)
            .await
            .map_err(|e| failed("unfreeze filesystems", e))?;
        Ok(())
    }

    async fn soft_reboot(&self, cmd: VmiCommand) -> CmdResult {
        let method =
            crate::reboot::reboot_method(&cmd.vmi).map_err(|e| CmdError::failed(e.to_string()))?;
        self.on_domain("soft reboot domain", |c, d| async move {
            match c.reboot(&d, method.flags()).await {
                // The agent took the request and went away: the guest is rebooting.
                Err(LibvirtError::Remote { code, .. })
                    if code == crate::reboot::ERR_AGENT_UNRESPONSIVE =>
                {
                    Ok(())
                }
                other => other,
            }
        })
        .await
    }

    async fn reset(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        self.on_domain("reset domain", |c, d| async move { c.reset(&d).await })
            .await
    }

    async fn migrate(&self, vmi: VirtualMachineInstance, options_json: Vec<u8>) -> CmdResult {
        self.adopt(&vmi)?;
        let source = crate::migration::shell::Source {
            domain_name: self.domain_name(),
            share_dir: self.flags.kubevirt_share_dir.clone(),
            ephemeral_disk_dir: self.flags.ephemeral_disk_dir.clone(),
            non_root: !nix::unistd::geteuid().is_root(),
        };
        crate::migration::shell::start(
            self.conn.clone(),
            self.migration.clone(),
            source,
            vmi,
            &options_json,
        )
        .map_err(|e| failed("migrate", e))
    }

    async fn sync_migration_target(&self, cmd: VmiCommand) -> CmdResult {
        self.adopt(&cmd.vmi)?;
        let _guard = self.lock.lock().await;
        self.link_image_volumes(&cmd.vmi)?;
        // The target prepares what the incoming domain will use (disks, cloud-init, the pod
        // network) as a start would, but defines nothing: libvirt creates the domain from the
        // source's XML when the migration arrives.
        let mut wanted = self.convert(&cmd).await?;
        prestart::prepare(&cmd.vmi, &wanted, &self.flags, &self.hooks)
            .await
            .map_err(CmdError::Failed)?;
        network::setup_phase2(
            &cmd.vmi,
            &cmd.options.interface_domain_attachment,
            &mut wanted,
            &network::dhcp::DhcpEnv::pod(),
        )
        .map_err(|e| failed("preparing the pod network failed", e))?;
        crate::migration::shell::prepare_target(
            &self.conn,
            &self.migration,
            &self.flags.kubevirt_share_dir,
            &self.domain_name(),
            &cmd.vmi,
        )
        .map_err(CmdError::Failed)
    }

    async fn cancel_migration(&self, cmd: VmiCommand) -> CmdResult {
        self.adopt(&cmd.vmi)?;
        crate::migration::shell::cancel(&self.conn, &self.migration, &self.domain_name());
        Ok(())
    }

    async fn finalize_migration(&self, cmd: VmiCommand) -> CmdResult {
        let _ = cmd;
        let _guard = self.lock.lock().await;
        let Some(dom) = self.find().await? else {
            return Err(failed(
                "finalize migration",
                "the domain does not exist on the target",
            ));
        };
        crate::migration::shell::finalize(&self.conn, &dom).await;
        Ok(())
    }

    async fn get_domain(&self) -> CmdResult<Option<String>> {
        let Some(dom) = self.find().await? else {
            return Ok(None);
        };
        // KubeVirt's GetDomain adds the agent's OS and interfaces (not the freeze state).
        let agent = AgentStatus {
            fs_freeze: None,
            ..self.agent_status()
        };
        match domain_json(&self.conn, &dom, &self.owner(), agent).await {
            Ok(json) => Ok(Some(String::from_utf8_lossy(&json).into_owned())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(failed("read domain", e)),
        }
    }

    async fn get_guest_info(&self) -> CmdResult<String> {
        Ok(agent::guest_info_json(&self.agent.snapshot()))
    }

    async fn get_users(&self) -> CmdResult<String> {
        Ok(agent::users_json(&self.agent.snapshot()))
    }

    async fn get_filesystems(&self) -> CmdResult<String> {
        Ok(agent::filesystems_json(&self.agent.snapshot()))
    }

    async fn get_domain_stats(&self) -> CmdResult<Option<String>> {
        let Some(dom) = self.find().await? else {
            return Ok(None);
        };
        let info = match self.conn.info(&dom).await {
            Ok(i) => i,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(failed("read domain stats", e)),
        };
        let uuid = format_uuid(&dom.uuid);
        // KubeVirt's stats.DomainStats shape, with the counters libvirt's basic info gives.
        let stats = serde_json::json!({
            "Name": dom.name,
            "UUID": uuid,
            "Cpu": {"TimeSet": true, "Time": info.cpu_time_ns},
            "Memory": {"ActualBalloonSet": true, "ActualBalloon": info.memory_kib},
            "Vcpu": (0..info.vcpus).map(|_| serde_json::json!({"StateSet": false})).collect::<Vec<_>>(),
        });
        Ok(Some(stats.to_string()))
    }

    async fn ping(&self) -> CmdResult {
        Ok(())
    }

    async fn get_qemu_version(&self) -> CmdResult<String> {
        let v = self
            .conn
            .hypervisor_version()
            .await
            .map_err(|e| failed("read QEMU version", e))?;
        Ok(format!(
            "{}.{}.{}",
            v / 1_000_000,
            v / 1000 % 1000,
            v % 1000
        ))
    }
}

fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_print_canonically() {
        let mut u = [0u8; 16];
        u[0] = 0xab;
        u[15] = 0x01;
        assert_eq!(format_uuid(&u), "ab000000-0000-0000-0000-000000000001");
    }
}
