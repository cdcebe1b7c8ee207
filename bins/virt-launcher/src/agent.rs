//! The guest agent: what the QEMU guest agent inside the VM reports, polled through libvirt as
//! KubeVirt's launcher polls it, kept for `GetGuestInfo` / `GetUsers` / `GetFilesystems` /
//! `GetDomain` and pushed to the handler as a domain event when the guest's OS, interfaces or
//! freeze state change.
//!
//! The poller runs only while the agent is connected (libvirt's agent-lifecycle event), and
//! pauses while the domain is suspended. Each poll group starts at once, then waits 10 s,
//! doubling up to its own interval (KubeVirt's `--qemu-agent-*-interval` flags), so a booting
//! guest shows up quickly and a steady one costs one call per interval.
//!
//! Parsing is plain functions over libvirt's typed parameters and the agent's JSON, tested
//! below; the tasks around them only sleep and call.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvrs_converter::gojson::{FsFreeze, GuestOsInfo, InterfaceStatus};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::libvirt::{Connection, DomainRef, Libvirt, TypedParam, TypedValue, guest_info};
use crate::log;

/// The first wait between polls; it doubles up to the group's interval.
const POLL_INITIAL: Duration = Duration::from_secs(10);

/// How often each poll group runs (KubeVirt's launcher flags and their defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intervals {
    /// `--qemu-agent-sys-interval` (120 s): OS, interfaces, hostname, timezone, load.
    pub sys: Duration,
    /// `--qemu-agent-file-interval` (300 s): filesystems.
    pub file: Duration,
    /// `--qemu-agent-user-interval` (10 s): logged-in users.
    pub user: Duration,
    /// `--qemu-agent-version-interval` (300 s): agent version and supported commands.
    pub version: Duration,
    /// `--qemu-fsfreeze-status-interval` (5 s): filesystem freeze state.
    pub fs_freeze: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals {
            sys: Duration::from_secs(120),
            file: Duration::from_secs(300),
            user: Duration::from_secs(10),
            version: Duration::from_secs(300),
            fs_freeze: Duration::from_secs(5),
        }
    }
}

/// The agent's `guest-info`: its version and commands.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentInfo {
    /// e.g. `7.2.0`.
    pub version: String,
    /// `(name, enabled)` per command.
    pub supported_commands: Vec<(String, bool)>,
}

/// A logged-in guest user.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct User {
    /// User name.
    pub name: String,
    /// Windows domain.
    pub domain: String,
    /// Login time, seconds since the epoch.
    pub login_time: f64,
}

/// A guest filesystem (`guest-get-fsinfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filesystem {
    /// Device name, e.g. `vda1`.
    pub name: String,
    /// Mount point.
    pub mountpoint: String,
    /// Filesystem type.
    pub kind: String,
    /// Used bytes.
    pub used_bytes: i64,
    /// Total bytes.
    pub total_bytes: i64,
    /// `(serial, bus type)` of the disks behind it.
    pub disks: Vec<(String, String)>,
}

/// Everything the agent told so far; `None` = never answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentData {
    /// `guest-info`.
    pub agent: Option<AgentInfo>,
    /// OS (`virDomainGetGuestInfo` OS).
    pub os: Option<GuestOsInfo>,
    /// Interfaces without `lo`.
    pub interfaces: Option<Vec<InterfaceStatus>>,
    /// Host name.
    pub hostname: Option<String>,
    /// `(zone, offset seconds)`.
    pub timezone: Option<(String, i64)>,
    /// Users.
    pub users: Option<Vec<User>>,
    /// Filesystems.
    pub filesystems: Option<Vec<Filesystem>>,
    /// Freeze state.
    pub fs_freeze: Option<FsFreeze>,
}

/// The launcher's agent data, shared by the poller, the cmd server and the event forwarder.
#[derive(Debug)]
pub struct AgentStore {
    data: Mutex<AgentData>,
    changed: mpsc::UnboundedSender<()>,
}

impl AgentStore {
    /// A store that sends `()` on `changed` whenever the domain-visible part changes.
    pub fn new(changed: mpsc::UnboundedSender<()>) -> Self {
        AgentStore {
            data: Mutex::default(),
            changed,
        }
    }

    /// A copy of what is known.
    pub fn snapshot(&self) -> AgentData {
        self.data.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// Applies `update`; tells the forwarder when OS, interfaces or freeze state changed —
    /// the part of the agent's data the handler sees in the domain's status, which KubeVirt
    /// pushes as a domain event when it changes, and only then.
    pub fn update(&self, update: impl FnOnce(&mut AgentData)) {
        let changed = {
            let Ok(mut d) = self.data.lock() else { return };
            let before = (d.os.clone(), d.interfaces.clone(), d.fs_freeze.clone());
            update(&mut d);
            before.0 != d.os || before.1 != d.interfaces || before.2 != d.fs_freeze
        };
        if changed {
            let _ = self.changed.send(());
        }
    }
}

/// The running poll tasks; dropping or [`stop`](Poller::stop)ping aborts them.
#[derive(Debug, Default)]
pub struct Poller {
    tasks: Vec<JoinHandle<()>>,
}

impl Poller {
    /// Whether polling is on.
    pub fn running(&self) -> bool {
        !self.tasks.is_empty()
    }

    /// Starts the poll groups for `domain` (no-op when running).
    pub fn start(
        &mut self,
        conn: &Arc<Connection>,
        domain: &DomainRef,
        store: &Arc<AgentStore>,
        every: Intervals,
    ) {
        if self.running() {
            return;
        }
        log::info(format_args!(
            "guest agent connected: polling {}",
            domain.name
        ));
        let group = |interval: Duration, poll: Poll| {
            let (conn, domain, store) = (conn.clone(), domain.clone(), store.clone());
            tokio::spawn(async move {
                let mut wait = POLL_INITIAL.min(interval);
                loop {
                    poll.run(&conn, &domain, &store).await;
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(interval);
                }
            })
        };
        self.tasks = vec![
            group(every.version, Poll::Command(AgentCommand::Info)),
            group(every.file, Poll::Command(AgentCommand::FsInfo)),
            group(every.fs_freeze, Poll::Command(AgentCommand::FsFreezeStatus)),
            group(
                every.sys,
                Poll::GuestInfo(
                    guest_info::INTERFACES
                        | guest_info::OS
                        | guest_info::HOSTNAME
                        | guest_info::TIMEZONE,
                ),
            ),
            group(every.user, Poll::GuestInfo(guest_info::USERS)),
            group(every.sys, Poll::GuestInfo(guest_info::LOAD)),
        ];
    }

    /// Stops polling.
    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A raw agent command KubeVirt polls.
#[derive(Debug, Clone, Copy)]
enum AgentCommand {
    Info,
    FsInfo,
    FsFreezeStatus,
}

impl AgentCommand {
    fn name(self) -> &'static str {
        match self {
            AgentCommand::Info => "guest-info",
            AgentCommand::FsInfo => "guest-get-fsinfo",
            AgentCommand::FsFreezeStatus => "guest-fsfreeze-status",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Poll {
    Command(AgentCommand),
    GuestInfo(u32),
}

impl Poll {
    async fn run(self, conn: &Connection, domain: &DomainRef, store: &AgentStore) {
        match self {
            Poll::Command(cmd) => {
                let request = format!(r#"{{"execute":"{}"}}"#, cmd.name());
                // An agent that does not answer (yet) is normal: the next poll tries again.
                let Ok(reply) = conn.agent_command(domain, &request).await else {
                    return;
                };
                match cmd {
                    AgentCommand::Info => match parse_agent_info(&reply) {
                        Some(info) => store.update(|d| d.agent = Some(info)),
                        None => log::warn(format_args!("cannot parse guest-info: {reply}")),
                    },
                    AgentCommand::FsInfo => match parse_filesystems(&reply) {
                        Some(fs) => store.update(|d| d.filesystems = Some(fs)),
                        None => log::warn(format_args!("cannot parse guest-get-fsinfo: {reply}")),
                    },
                    AgentCommand::FsFreezeStatus => match parse_fs_freeze(&reply) {
                        Some(f) => store.update(|d| d.fs_freeze = Some(f)),
                        None => {
                            log::warn(format_args!("cannot parse guest-fsfreeze-status: {reply}"))
                        }
                    },
                }
            }
            Poll::GuestInfo(types) => match conn.guest_info(domain, types).await {
                Ok(params) => {
                    let info = GuestInfoParams::new(&params);
                    store.update(|d| info.apply(types, d));
                }
                Err(e) => log::warn(format_args!("guest info ({types:#x}): {e}")),
            },
        }
    }
}

/// `virDomainGetGuestInfo`'s typed parameters by field name.
struct GuestInfoParams<'a>(BTreeMap<&'a str, &'a TypedValue>);

impl<'a> GuestInfoParams<'a> {
    fn new(params: &'a [TypedParam]) -> Self {
        GuestInfoParams(
            params
                .iter()
                .map(|p| (p.field.as_str(), &p.value))
                .collect(),
        )
    }

    fn string(&self, field: &str) -> String {
        match self.0.get(field) {
            Some(TypedValue::String(s)) => s.clone(),
            _ => String::new(),
        }
    }

    fn int(&self, field: &str) -> i64 {
        match self.0.get(field) {
            Some(TypedValue::Int(v)) => *v,
            Some(TypedValue::Uint(v)) => i64::try_from(*v).unwrap_or(0),
            _ => 0,
        }
    }

    /// A count field, bounded by the number of parameters there are (a hostile count cannot
    /// make the loops below run long).
    fn count(&self, field: &str) -> usize {
        let n = match self.0.get(field) {
            Some(TypedValue::Uint(v)) => usize::try_from(*v).unwrap_or(usize::MAX),
            Some(TypedValue::Int(v)) => usize::try_from(*v).unwrap_or(0),
            _ => 0,
        };
        n.min(self.0.len())
    }

    /// Stores what `types` asked for, as KubeVirt's poller converts it.
    fn apply(&self, types: u32, d: &mut AgentData) {
        if types & guest_info::OS != 0 {
            d.os = Some(GuestOsInfo {
                name: self.string("os.name"),
                kernel_release: self.string("os.kernel-release"),
                version: self.string("os.version"),
                pretty_name: self.string("os.pretty-name"),
                version_id: self.string("os.version-id"),
                kernel_version: self.string("os.kernel-version"),
                machine: self.string("os.machine"),
                id: self.string("os.id"),
            });
        }
        if types & guest_info::INTERFACES != 0 {
            d.interfaces = Some(self.interfaces());
        }
        if types & guest_info::HOSTNAME != 0 {
            d.hostname = Some(self.string("hostname"));
        }
        if types & guest_info::TIMEZONE != 0 {
            d.timezone = Some((self.string("timezone.name"), self.int("timezone.offset")));
        }
        if types & guest_info::USERS != 0 {
            d.users = Some(
                (0..self.count("user.count"))
                    .map(|i| User {
                        name: self.string(&format!("user.{i}.name")),
                        domain: self.string(&format!("user.{i}.domain")),
                        login_time: login_seconds(
                            self.0.get(format!("user.{i}.login-time").as_str()),
                        ),
                    })
                    .collect(),
            );
        }
    }

    /// Every interface but `lo`; the first IPv4 address is the primary one, else the first.
    fn interfaces(&self) -> Vec<InterfaceStatus> {
        let mut out = Vec::new();
        for i in 0..self.count("if.count") {
            let name = self.string(&format!("if.{i}.name"));
            if name == "lo" {
                continue;
            }
            let mut ips = Vec::new();
            let mut primary = String::new();
            for a in 0..self.count(&format!("if.{i}.addr.count")) {
                let ip = self.string(&format!("if.{i}.addr.{a}.addr"));
                if primary.is_empty() && self.string(&format!("if.{i}.addr.{a}.type")) == "ipv4" {
                    primary = ip.clone();
                }
                ips.push(ip);
            }
            if primary.is_empty()
                && let Some(first) = ips.first()
            {
                primary = first.clone();
            }
            out.push(InterfaceStatus {
                mac: self.string(&format!("if.{i}.hwaddr")),
                ip: primary,
                ips,
                interface_name: name,
            });
        }
        out
    }
}

/// libvirt reports login time in milliseconds; KubeVirt keeps seconds (a float). A value over
/// `i64::MAX` is 0, as KubeVirt's overflow check makes it.
fn login_seconds(v: Option<&&TypedValue>) -> f64 {
    let ms = match v {
        Some(TypedValue::Uint(ms)) if i64::try_from(*ms).is_ok() => *ms,
        Some(TypedValue::Int(ms)) => u64::try_from(*ms).unwrap_or(0),
        _ => 0,
    };
    Duration::from_millis(ms).as_secs_f64()
}

/// The `return` member of an agent answer.
fn agent_return(reply: &str) -> Option<Value> {
    let mut v: Value = serde_json::from_str(reply).ok()?;
    Some(v.get_mut("return")?.take())
}

/// `guest-info` → version and commands.
pub fn parse_agent_info(reply: &str) -> Option<AgentInfo> {
    let r = agent_return(reply)?;
    Some(AgentInfo {
        version: r.get("version")?.as_str()?.to_string(),
        supported_commands: r
            .get("supported_commands")
            .and_then(Value::as_array)
            .map(|cmds| {
                cmds.iter()
                    .filter_map(|c| {
                        Some((
                            c.get("name")?.as_str()?.to_string(),
                            c.get("enabled").and_then(Value::as_bool).unwrap_or(false),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// `guest-get-fsinfo` → filesystems.
pub fn parse_filesystems(reply: &str) -> Option<Vec<Filesystem>> {
    let r = agent_return(reply)?;
    let text = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_i64).unwrap_or(0);
    Some(
        r.as_array()?
            .iter()
            .map(|fs| Filesystem {
                name: text(fs, "name"),
                mountpoint: text(fs, "mountpoint"),
                kind: text(fs, "type"),
                used_bytes: num(fs, "used-bytes"),
                total_bytes: num(fs, "total-bytes"),
                disks: fs
                    .get("disk")
                    .and_then(Value::as_array)
                    .map(|ds| {
                        ds.iter()
                            .map(|d| (text(d, "serial"), text(d, "bus-type")))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect(),
    )
}

/// `guest-fsfreeze-status` → `thawed` / `frozen`.
pub fn parse_fs_freeze(reply: &str) -> Option<FsFreeze> {
    let status = agent_return(reply)?.as_str()?.to_string();
    (!status.is_empty()).then_some(FsFreeze { status })
}

/// KubeVirt's `VirtualMachineInstanceGuestAgentInfo` JSON, as Go marshals it from the
/// launcher's store (at most 10 users and filesystems, timezone as `"<zone>, <offset>"`).
pub fn guest_info_json(d: &AgentData) -> String {
    let mut out = serde_json::Map::new();
    if let Some(a) = d.agent.as_ref().filter(|a| !a.version.is_empty()) {
        out.insert("guestAgentVersion".into(), json!(a.version));
    }
    if let Some(a) = d
        .agent
        .as_ref()
        .filter(|a| !a.supported_commands.is_empty())
    {
        let cmds: Vec<Value> = a
            .supported_commands
            .iter()
            .map(|(name, enabled)| {
                let mut c = serde_json::Map::new();
                c.insert("name".into(), json!(name));
                if *enabled {
                    c.insert("enabled".into(), json!(true));
                }
                Value::Object(c)
            })
            .collect();
        out.insert("supportedCommands".into(), Value::Array(cmds));
    }
    if let Some(h) = d.hostname.as_ref().filter(|h| !h.is_empty()) {
        out.insert("hostname".into(), json!(h));
    }
    let os = d.os.clone().unwrap_or_default();
    let mut o = serde_json::Map::new();
    for (k, v) in [
        ("name", &os.name),
        ("kernelRelease", &os.kernel_release),
        ("version", &os.version),
        ("prettyName", &os.pretty_name),
        ("versionId", &os.version_id),
        ("kernelVersion", &os.kernel_version),
        ("machine", &os.machine),
        ("id", &os.id),
    ] {
        if !v.is_empty() {
            o.insert(k.into(), json!(v));
        }
    }
    out.insert("os".into(), Value::Object(o));
    let (zone, offset) = d.timezone.clone().unwrap_or_default();
    out.insert("timezone".into(), json!(format!("{zone}, {offset}")));
    let users: Vec<Value> = d.users.iter().flatten().take(10).map(user_json).collect();
    if !users.is_empty() {
        out.insert("userList".into(), Value::Array(users));
    }
    let fs: Vec<Value> = d
        .filesystems
        .iter()
        .flatten()
        .take(10)
        .map(filesystem_json)
        .collect();
    out.insert(
        "fsInfo".into(),
        json!({ "disks": if fs.is_empty() { Value::Null } else { Value::Array(fs) } }),
    );
    if let Some(f) = d.fs_freeze.as_ref().filter(|f| !f.status.is_empty()) {
        out.insert("fsFreezeStatus".into(), json!(f.status));
    }
    Value::Object(out).to_string()
}

/// `GetUsers`: every user, as a JSON list (`[]` when none).
pub fn users_json(d: &AgentData) -> String {
    Value::Array(d.users.iter().flatten().map(user_json).collect()).to_string()
}

/// `GetFilesystems`: every filesystem, as a JSON list (`[]` when none).
pub fn filesystems_json(d: &AgentData) -> String {
    Value::Array(
        d.filesystems
            .iter()
            .flatten()
            .map(filesystem_json)
            .collect(),
    )
    .to_string()
}

fn user_json(u: &User) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("userName".into(), json!(u.name));
    if !u.domain.is_empty() {
        m.insert("domain".into(), json!(u.domain));
    }
    if u.login_time != 0.0 {
        m.insert("loginTime".into(), json!(u.login_time));
    }
    Value::Object(m)
}

fn filesystem_json(f: &Filesystem) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("diskName".into(), json!(f.name));
    m.insert("mountPoint".into(), json!(f.mountpoint));
    m.insert("fileSystemType".into(), json!(f.kind));
    m.insert("usedBytes".into(), json!(f.used_bytes));
    m.insert("totalBytes".into(), json!(f.total_bytes));
    if !f.disks.is_empty() {
        let disks: Vec<Value> = f
            .disks
            .iter()
            .map(|(serial, bus)| {
                let mut d = serde_json::Map::new();
                if !serial.is_empty() {
                    d.insert("serial".into(), json!(serial));
                }
                d.insert("busType".into(), json!(bus));
                Value::Object(d)
            })
            .collect();
        m.insert("disk".into(), Value::Array(disks));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(field: &str, value: TypedValue) -> TypedParam {
        TypedParam {
            field: field.into(),
            value,
        }
    }
    fn s(v: &str) -> TypedValue {
        TypedValue::String(v.into())
    }

    #[test]
    fn guest_info_becomes_os_interfaces_and_timezone_like_kubevirt() {
        let params = vec![
            p("os.id", s("debian")),
            p("os.name", s("Debian GNU/Linux")),
            p("os.pretty-name", s("Debian GNU/Linux 12 (bookworm)")),
            p("os.kernel-release", s("6.1.0-41-cloud-amd64")),
            p("os.machine", s("x86_64")),
            p("hostname", s("guest")),
            p("timezone.name", s("UTC")),
            p("timezone.offset", TypedValue::Int(0)),
            p("if.count", TypedValue::Uint(2)),
            p("if.0.name", s("lo")),
            p("if.0.addr.count", TypedValue::Uint(1)),
            p("if.0.addr.0.addr", s("127.0.0.1")),
            p("if.1.name", s("eth0")),
            p("if.1.hwaddr", s("02:00:00:12:34:56")),
            p("if.1.addr.count", TypedValue::Uint(2)),
            p("if.1.addr.0.type", s("ipv6")),
            p("if.1.addr.0.addr", s("fe80::1")),
            p("if.1.addr.1.type", s("ipv4")),
            p("if.1.addr.1.addr", s("10.0.2.2")),
        ];
        let mut d = AgentData::default();
        GuestInfoParams::new(&params).apply(
            guest_info::OS | guest_info::INTERFACES | guest_info::HOSTNAME | guest_info::TIMEZONE,
            &mut d,
        );
        let os = d.os.clone().unwrap();
        assert_eq!((os.id.as_str(), os.machine.as_str()), ("debian", "x86_64"));
        assert_eq!(
            d.interfaces,
            Some(vec![InterfaceStatus {
                mac: "02:00:00:12:34:56".into(),
                ip: "10.0.2.2".into(),
                ips: vec!["fe80::1".into(), "10.0.2.2".into()],
                interface_name: "eth0".into(),
            }])
        );
        let v: Value = serde_json::from_str(&guest_info_json(&d)).unwrap();
        assert_eq!(v["timezone"], "UTC, 0");
        assert_eq!(v["hostname"], "guest");
        assert_eq!(v["os"]["prettyName"], "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(v["fsInfo"], json!({"disks": null}));
        assert!(v.get("guestAgentVersion").is_none());
    }

    #[test]
    fn hostile_counts_are_bounded_by_the_parameters_present() {
        let params = vec![
            p("if.count", TypedValue::Uint(u64::MAX)),
            p("user.count", TypedValue::Int(i64::MAX)),
        ];
        let mut d = AgentData::default();
        GuestInfoParams::new(&params).apply(guest_info::INTERFACES | guest_info::USERS, &mut d);
        assert_eq!(d.interfaces.map(|i| i.len()), Some(2));
        assert_eq!(d.users.map(|u| u.len()), Some(2));
    }

    #[test]
    fn agent_commands_parse_like_kubevirt() {
        let info = parse_agent_info(
            r#"{"return":{"version":"7.2.0","supported_commands":[{"enabled":true,"name":"guest-ping","success-response":true},{"enabled":false,"name":"guest-exec"}]}}"#,
        )
        .unwrap();
        assert_eq!(info.version, "7.2.0");
        assert_eq!(
            info.supported_commands,
            vec![("guest-ping".into(), true), ("guest-exec".into(), false)]
        );
        let fs = parse_filesystems(
            r#"{"return":[{"name":"vda1","mountpoint":"/","type":"ext4","used-bytes":10,"total-bytes":20,"disk":[{"serial":"abc","bus-type":"virtio"}]}]}"#,
        )
        .unwrap();
        assert_eq!(fs[0].disks, vec![("abc".to_string(), "virtio".to_string())]);
        assert_eq!(
            parse_fs_freeze(r#"{"return":"thawed"}"#).unwrap().status,
            "thawed"
        );
        assert!(parse_agent_info("not json").is_none());
        let d = AgentData {
            agent: Some(info),
            filesystems: Some(fs),
            ..AgentData::default()
        };
        let v: Value = serde_json::from_str(&guest_info_json(&d)).unwrap();
        assert_eq!(v["guestAgentVersion"], "7.2.0");
        assert_eq!(
            v["supportedCommands"],
            json!([{"name": "guest-ping", "enabled": true}, {"name": "guest-exec"}])
        );
        assert_eq!(v["fsInfo"]["disks"][0]["disk"][0]["busType"], "virtio");
        assert_eq!(filesystems_json(&AgentData::default()), "[]");
        assert_eq!(users_json(&AgentData::default()), "[]");
    }

    #[test]
    fn only_os_interface_or_freeze_changes_wake_the_forwarder() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let store = AgentStore::new(tx);
        store.update(|d| d.hostname = Some("h".into()));
        assert!(rx.try_recv().is_err());
        store.update(|d| d.os = Some(GuestOsInfo::default()));
        assert!(rx.try_recv().is_ok());
        store.update(|d| d.os = Some(GuestOsInfo::default()));
        assert!(rx.try_recv().is_err(), "an unchanged answer is no change");
        store.update(|d| {
            d.fs_freeze = Some(FsFreeze {
                status: "thawed".into(),
            })
        });
        assert!(rx.try_recv().is_ok());
    }
}
