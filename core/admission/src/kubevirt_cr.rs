//! The [`ClusterConfig`] a KubeVirt CR (`kind: KubeVirt`) gives, read from its
//! `spec.configuration` the way KubeVirt v1.9.0 reads it.
//!
//! KubeVirt lays the CR's configuration over its built-in one, and a zero value counts as not
//! set (`cpuAllocationRatio: 0` keeps 10, `smbios.product: ""` keeps `None`), except for
//! `memBalloonStatsPeriod`, where 0 turns the statistics off. A configuration KubeVirt would
//! refuse (a negative ratio, an unknown default interface) is refused here too: the cluster would
//! keep its previous configuration, and an answer computed from that would be a surprise.
//!
//! A field kvrs models with the wrong JSON type is an error naming its path. What kvrs does not
//! apply is never a reason to drop the rest: the CR is applied in the part kvrs understands, and
//! every setting left out is listed in [`KubevirtCr::not_applied`] with its path and why — the
//! settings no kvrs daemon reads yet (KubeVirt has dozens), and those it reads but cannot honour
//! yet (an arm64 or s390x machine type other than KubeVirt's, turning off a beta gate that VMI
//! validation consults). The daemons report that list once per CR and list (a log line and an
//! event). Network binding plugins are kept by name ([`KubevirtCr::network_bindings`]) so callers
//! can tell "not configured" from "configured, but not supported by kvrs". What only the daemons
//! read (pull policy, VM options, eviction strategy) is [`DaemonSettings`].
//!
//! Read (and applied live by virt-controller and virt-handler): `developerConfiguration`
//! (`featureGates`, `disabledFeatureGates`, `useEmulation`, `cpuAllocationRatio`,
//! `memoryOvercommit`; `pvcTolerateLessSpaceUpToPercent` checked only), `cpuRequest`,
//! `architectureConfiguration` (default architecture, machine types, `emulatedMachines`), the
//! legacy `machineType` and `emulatedMachines`, `network.defaultNetworkInterface`,
//! `network.binding` (plugins and whether they migrate), `smbios`, `memBalloonStatsPeriod`,
//! `additionalGuestMemoryOverheadRatio`, `liveUpdateConfiguration.maxHotplugRatio`,
//! `vmRolloutStrategy`, `vmStateStorageClass`, `imagePullPolicy`, `virtualMachineOptions`, `evictionStrategy`,
//! `supportedGuestAgentVersions`, and the CR's `kubevirt.io/vga-display-efi-x86` annotation.
//!
//! `migrations.parallelMigrationsPerCluster` and `parallelOutboundMigrationsPerNode` are
//! checked here and applied by virt-controller's migration controller; the settings a
//! migration carries in `status.migrationState.migrationConfiguration` and kvrs's virt-handler
//! and launcher act on (bandwidth, timeouts, auto-converge, post-copy, workload disruption, the
//! unsafe override, TLS) apply; the others are listed as not applied.
//!
//! Not read, because no kvrs daemon acts on them yet (listed as not applied):
//! `permittedHostDevices` and `mediatedDevicesConfiguration`
//! (virt-handler serves only the kvm, tun and vhost-net device plugins),
//! `developerConfiguration.logVerbosity`, `developerConfiguration.nodeSelectors`,
//! `seccompConfiguration`, `ksmConfiguration`, `tlsConfiguration`, `handlerConfiguration`,
//! `controllerConfiguration` (rate limits), and every other field.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::config::ClusterConfig;
use crate::feature_gates::{GateState, UnknownFeatureGate, gate_state};
use crate::quantity::Quantity;
use crate::validate::DEFAULT_ON_FEATURE_GATES;

mod daemon;

pub use daemon::{DaemonSettings, VGA_DISPLAY_FOR_EFI_GUESTS_ANNOTATION};

/// Why a KubeVirt CR gives no cluster configuration. Every message starts with the JSON path.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum KubevirtCrError {
    /// The document is not a `kubevirt.io` KubeVirt object.
    #[error("{path}: {found} is not {expected}")]
    NotKubevirt {
        /// `kind` or `apiVersion`.
        path: &'static str,
        /// What the document says.
        found: String,
        /// What a KubeVirt CR says.
        expected: &'static str,
    },
    /// A field kvrs models has the wrong JSON type.
    #[error("{path}: expected {expected}")]
    WrongType {
        /// Path of the field, e.g. `spec.configuration.developerConfiguration.cpuAllocationRatio`.
        path: String,
        /// What the field must be, e.g. `an integer`.
        expected: &'static str,
    },
    /// The value has the right type but KubeVirt v1.9.0 would refuse it.
    #[error("{path}: {reason}")]
    Invalid {
        /// Path of the field.
        path: String,
        /// Why it is refused.
        reason: String,
    },
    /// A feature gate KubeVirt v1.9.0 does not know.
    #[error("{path}: {source}")]
    UnknownGate {
        /// Path of the list entry, e.g. `...featureGates[1]`.
        path: String,
        /// The unknown gate.
        source: UnknownFeatureGate,
    },
}

impl KubevirtCrError {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            KubevirtCrError::NotKubevirt { .. } => "not_kubevirt_cr",
            KubevirtCrError::WrongType { .. } => "wrong_type",
            KubevirtCrError::Invalid { .. } => "invalid_value",
            KubevirtCrError::UnknownGate { .. } => "unknown_feature_gate",
        }
    }
}

/// A network binding plugin the CR configures (`spec.configuration.network.binding.<name>`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkBindingPlugin {
    /// The plugin's sidecar image, if any.
    pub sidecar_image: Option<String>,
    /// `namespace/name` of its NetworkAttachmentDefinition, if any.
    pub network_attachment_definition: Option<String>,
    /// How the domain attaches the interface (`tap`, `managedTap`), if set.
    pub domain_attachment_type: Option<String>,
    /// The plugin says how its interfaces migrate (`migration` is set): a VMI bound by it on
    /// the pod network is live-migratable.
    pub migration: bool,
}

/// What kvrs reads from a KubeVirt CR.
#[derive(Clone, Debug, PartialEq)]
pub struct KubevirtCr {
    /// The cluster configuration.
    pub config: ClusterConfig,
    /// Network binding plugins by name (`spec.configuration.network.binding`).
    pub network_bindings: BTreeMap<String, NetworkBindingPlugin>,
    /// What only the daemons read.
    pub daemon: DaemonSettings,
    /// Settings of `spec.configuration` kvrs left out, in document order; the rest applies.
    pub not_applied: Vec<NotApplied>,
}

/// A setting of a KubeVirt CR kvrs did not apply (the rest of the CR did).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotApplied {
    /// Its path, e.g. `spec.configuration.migrations`.
    pub path: String,
    /// Why it was left out.
    pub reason: String,
}

impl std::fmt::Display for NotApplied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.path, self.reason)
    }
}

/// The reason given for a setting no kvrs daemon reads.
pub const NOT_READ: &str = "no kvrs component reads this setting yet";

/// The cluster configuration of a KubeVirt CR (see the module documentation).
pub fn cluster_config_from_kubevirt_cr(doc: &Value) -> Result<ClusterConfig, KubevirtCrError> {
    read_kubevirt_cr(doc).map(|cr| cr.config)
}

/// The cluster configuration and network binding plugins of a KubeVirt CR.
pub fn read_kubevirt_cr(doc: &Value) -> Result<KubevirtCr, KubevirtCrError> {
    let reading = Reading::default();
    let root = Field::root(doc, &reading);
    check_kind(&root)?;
    let conf = root.get("spec")?.get("configuration")?;
    let mut config = ClusterConfig::default();
    read_developer(&conf.get("developerConfiguration")?, &mut config)?;
    if let Some(q) = conf.get("cpuRequest")?.quantity()? {
        config.cpu_request = q;
    }
    read_architecture(&conf, &mut config)?;
    let network = conf.get("network")?;
    if let Some(iface) = network.get("defaultNetworkInterface")?.string()? {
        match iface.as_str() {
            "" => {}
            "bridge" | "masquerade" | "slirp" => config.default_network_interface = iface,
            other => return Err(network.get("defaultNetworkInterface")?.invalid(format!(
                "{other:?} is not a default network interface KubeVirt accepts (bridge, masquerade, slirp)"
            ))),
        }
    }
    let network_bindings = read_bindings(&network.get("binding")?)?;
    read_smbios(&conf.get("smbios")?, &mut config)?;
    if let Some(period) = conf.get("memBalloonStatsPeriod")?.unsigned()? {
        config.mem_balloon_stats_period = period;
    }
    let ratio = conf.get("additionalGuestMemoryOverheadRatio")?;
    if let Some(text) = ratio.string()? {
        match text.parse::<f64>() {
            Ok(r) if r >= 1.0 => config.additional_guest_memory_overhead_ratio = Some(text),
            Ok(_) => return Err(ratio.invalid(format!("{text:?} cannot be smaller than 1.0"))),
            Err(_) => return Err(ratio.invalid(format!("{text:?} is not a number"))),
        }
    }
    if let Some(class) = conf.get("vmStateStorageClass")?.string()? {
        config.vm_state_storage_class = class;
    }
    let live = conf.get("liveUpdateConfiguration")?;
    if let Some(r) = live.get("maxHotplugRatio")?.unsigned()?.filter(|r| *r != 0) {
        config.max_hotplug_ratio = r;
    }
    let rollout = conf.get("vmRolloutStrategy")?;
    match rollout.string()?.as_deref() {
        None | Some("LiveUpdate") => {}
        Some("Stage") => config.live_update = false,
        Some(other) => {
            return Err(rollout.invalid(format!("{other:?} is not LiveUpdate or Stage")));
        }
    }
    read_migrations(&conf.get("migrations")?)?;
    let daemon = daemon::read(&root, &conf)?;
    let mut not_applied = reading.skipped.take();
    if let Some(configuration) = conf.value {
        not_read(
            configuration,
            &conf.path,
            &reading.seen.borrow(),
            &mut not_applied,
        );
    }
    Ok(KubevirtCr {
        config,
        network_bindings,
        daemon,
        not_applied,
    })
}

/// The settings under `value` (at `path`) that the read never looked at. A member looked at
/// whose own members were not (an option object taken whole, like a binding's `migration`)
/// counts as read; null and empty values set nothing and are not listed.
fn not_read(value: &Value, path: &str, seen: &BTreeSet<String>, out: &mut Vec<NotApplied>) {
    let Value::Object(map) = value else {
        return;
    };
    for (key, member) in map {
        let empty = match member {
            Value::Null => true,
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        };
        if empty {
            continue;
        }
        let member_path = format!("{path}.{key}");
        if !seen.contains(&member_path) {
            out.push(NotApplied {
                path: member_path,
                reason: NOT_READ.into(),
            });
            continue;
        }
        let prefix = format!("{member_path}.");
        let members_read = seen
            .range(prefix.clone()..)
            .next()
            .is_some_and(|p| p.starts_with(&prefix));
        if members_read {
            not_read(member, &member_path, seen, out);
        }
    }
}

fn check_kind(root: &Field<'_>) -> Result<(), KubevirtCrError> {
    if !root.value.is_some_and(Value::is_object) {
        return Err(KubevirtCrError::WrongType {
            path: "(top level)".into(),
            expected: "a KubeVirt object",
        });
    }
    let kind = root.get("kind")?.string()?.unwrap_or_default();
    if kind != "KubeVirt" {
        return Err(KubevirtCrError::NotKubevirt {
            path: "kind",
            found: format!("{kind:?}"),
            expected: "KubeVirt",
        });
    }
    let api_version = root.get("apiVersion")?.string()?.unwrap_or_default();
    if !matches!(
        api_version.as_str(),
        "kubevirt.io/v1" | "kubevirt.io/v1alpha3"
    ) {
        return Err(KubevirtCrError::NotKubevirt {
            path: "apiVersion",
            found: format!("{api_version:?}"),
            expected: "kubevirt.io/v1",
        });
    }
    Ok(())
}

fn read_developer(dev: &Field<'_>, config: &mut ClusterConfig) -> Result<(), KubevirtCrError> {
    let enabled = gate_list(&dev.get("featureGates")?)?;
    let disabled = gate_list(&dev.get("disabledFeatureGates")?)?;
    for (path, gate) in &disabled {
        if enabled.iter().any(|(_, g)| g == gate) {
            return Err(KubevirtCrError::Invalid {
                path: path.clone(),
                reason: format!(
                    "feature gate {gate:?} is both in featureGates and disabledFeatureGates"
                ),
            });
        }
        // Disabling an alpha gate changes nothing (it is off), nor a GA one (it cannot be
        // turned off); a beta gate is on by default, which kvrs's configuration cannot undo.
        if gate_state(gate) == Some(GateState::Beta)
            && DEFAULT_ON_FEATURE_GATES.contains(&gate.as_str())
        {
            dev.reading.skipped.borrow_mut().push(NotApplied {
                path: path.clone(),
                reason: format!(
                    "kvrs cannot turn off the beta feature gate {gate:?} yet: it stays on"
                ),
            });
        }
    }
    config
        .feature_gates
        .extend(enabled.into_iter().map(|(_, g)| g));
    if let Some(on) = dev.get("useEmulation")?.boolean()? {
        config.use_emulation = on;
    }
    let ratio = dev.get("cpuAllocationRatio")?;
    if let Some(r) = ratio.integer()?.filter(|r| *r != 0) {
        config.cpu_allocation_ratio = positive(&ratio, r, "the cpu allocation ratio")?;
    }
    let overcommit = dev.get("memoryOvercommit")?;
    if let Some(p) = overcommit.integer()?.filter(|p| *p != 0) {
        config.memory_overcommit_percent = positive(&overcommit, p, "the memory overcommit")?;
    }
    Ok(())
}

/// A positive integer that fits the configuration's `u32`.
fn positive(field: &Field<'_>, n: i64, what: &str) -> Result<u32, KubevirtCrError> {
    if n < 0 {
        return Err(field.invalid(format!("{what} must be positive, got {n}")));
    }
    u32::try_from(n).map_err(|_| field.invalid(format!("{what} {n} is too large")))
}

/// A list of strings (`None` when absent).
fn string_list(list: &Field<'_>) -> Result<Option<Vec<String>>, KubevirtCrError> {
    if list.value.is_none_or(Value::is_null) {
        return Ok(None);
    }
    let mut out = Vec::new();
    for (i, item) in list.array()?.into_iter().enumerate() {
        let Some(Value::String(s)) = item else {
            return Err(KubevirtCrError::WrongType {
                path: format!("{}[{i}]", list.path),
                expected: "a string",
            });
        };
        out.push(s.clone());
    }
    Ok(Some(out))
}

/// The entries of a gate list, each with its path; unknown names are refused.
fn gate_list(list: &Field<'_>) -> Result<Vec<(String, String)>, KubevirtCrError> {
    let mut out = Vec::new();
    for (i, item) in list.array()?.into_iter().enumerate() {
        let path = format!("{}[{i}]", list.path);
        let Some(Value::String(name)) = item else {
            return Err(KubevirtCrError::WrongType {
                path,
                expected: "a feature gate name (a string)",
            });
        };
        crate::feature_gates::parse_feature_gates(name).map_err(|source| {
            KubevirtCrError::UnknownGate {
                path: path.clone(),
                source,
            }
        })?;
        out.push((path, name.trim().to_string()));
    }
    Ok(out)
}

/// The machine types kvrs's defaulting gives arm64 and s390x guests (KubeVirt's defaults); it
/// cannot give them another.
const FIXED_MACHINE_TYPES: &[(&str, &str)] = &[("arm64", "virt"), ("s390x", "s390-ccw-virtio")];

fn read_architecture(conf: &Field<'_>, config: &mut ClusterConfig) -> Result<(), KubevirtCrError> {
    let arch = conf.get("architectureConfiguration")?;
    let default_arch = arch.get("defaultArchitecture")?;
    match default_arch.string()?.as_deref() {
        None | Some("") => {}
        Some(a @ ("amd64" | "arm64" | "s390x")) => config.architecture = a.to_string(),
        Some(other) => {
            return Err(default_arch.invalid(format!(
                "{other:?} is not an architecture kvrs knows (amd64, arm64, s390x)"
            )));
        }
    }
    if let Some(m) = arch
        .get("amd64")?
        .get("machineType")?
        .string()?
        .filter(|m| !m.is_empty())
    {
        config.machine_type = m;
    }
    for (name, fixed) in FIXED_MACHINE_TYPES {
        let field = arch.get(name)?.get("machineType")?;
        if let Some(m) = field.string()?.filter(|m| !m.is_empty() && m != fixed) {
            field.skip(format!(
                "kvrs gives {name} guests the machine type {fixed:?}, not {m:?}"
            ));
        }
    }
    for name in ["amd64", "arm64", "s390x"] {
        let field = arch.get(name)?.get("emulatedMachines")?;
        if let Some(list) = string_list(&field)?.filter(|l| !l.is_empty()) {
            config.emulated_machines.insert(name.to_string(), list);
        }
    }
    let legacy_emulated = conf.get("emulatedMachines")?;
    if let Some(list) = string_list(&legacy_emulated)? {
        config.legacy_emulated_machines = Some(list);
    }
    // The deprecated cluster-wide machine type wins over the per-architecture ones.
    let legacy = conf.get("machineType")?;
    if let Some(m) = legacy.string()?.filter(|m| !m.is_empty()) {
        if config.architecture == "amd64" {
            config.machine_type = m;
        } else {
            legacy.skip(format!(
                "kvrs applies a cluster-wide machine type to amd64 guests only, and the \
                 default architecture is {}",
                config.architecture
            ));
        }
    }
    Ok(())
}

fn read_bindings(
    binding: &Field<'_>,
) -> Result<BTreeMap<String, NetworkBindingPlugin>, KubevirtCrError> {
    let mut out = BTreeMap::new();
    for name in binding.keys()? {
        let plugin = binding.get(&name)?;
        if !plugin.value.is_some_and(Value::is_object) {
            return Err(plugin.wrong("an object (a network binding plugin)"));
        }
        let text = |key: &str| -> Result<Option<String>, KubevirtCrError> {
            Ok(plugin.get(key)?.string()?.filter(|s| !s.is_empty()))
        };
        out.insert(
            name.clone(),
            NetworkBindingPlugin {
                sidecar_image: text("sidecarImage")?,
                network_attachment_definition: text("networkAttachmentDefinition")?,
                domain_attachment_type: text("domainAttachmentType")?,
                migration: match plugin.get("migration")?.value {
                    None => false,
                    Some(Value::Object(_)) => true,
                    Some(_) => return Err(plugin.get("migration")?.wrong("an object")),
                },
            },
        );
    }
    Ok(out)
}

/// The migration limits virt-controller's migration controller applies (checked here, read
/// by the controller from the CR), and the settings virt-controller copies into each
/// migration's `status.migrationState.migrationConfiguration` that kvrs's virt-handler turns
/// into the launcher's migration options; any other migration setting is listed as not
/// applied.
fn read_migrations(migrations: &Field<'_>) -> Result<(), KubevirtCrError> {
    const LIMITS: [&str; 2] = [
        "parallelMigrationsPerCluster",
        "parallelOutboundMigrationsPerNode",
    ];
    // Carried to virt-handler and the launcher with each migration, or (the drain taint key) read
    // by the evacuation controller.
    const CARRIED_OUT: [&str; 9] = [
        "nodeDrainTaintKey",
        "bandwidthPerMigration",
        "completionTimeoutPerGiB",
        "progressTimeout",
        "allowAutoConverge",
        "allowPostCopy",
        "allowWorkloadDisruption",
        "unsafeMigrationOverride",
        "disableTLS",
    ];
    for key in LIMITS {
        migrations.get(key)?.unsigned()?;
    }
    for key in migrations.keys()? {
        let setting = migrations.get(&key)?;
        let applied = LIMITS.contains(&key.as_str()) || CARRIED_OUT.contains(&key.as_str());
        if !applied && setting.value.is_some() {
            setting.skip(MIGRATION_NOT_CARRIED_OUT.into());
        }
    }
    Ok(())
}

/// Why a migration setting kvrs does not act on is not applied.
pub const MIGRATION_NOT_CARRIED_OUT: &str =
    "kvrs does not act on this migration setting yet: it only reaches migrationConfiguration";

fn read_smbios(smbios: &Field<'_>, config: &mut ClusterConfig) -> Result<(), KubevirtCrError> {
    let s = &mut config.smbios;
    let slots: [(&str, &mut String); 5] = [
        ("family", &mut s.family),
        ("manufacturer", &mut s.manufacturer),
        ("product", &mut s.product),
        ("sku", &mut s.sku),
        ("version", &mut s.version),
    ];
    for (key, slot) in slots {
        if let Some(v) = smbios.get(key)?.string()?.filter(|v| !v.is_empty()) {
            *slot = v;
        }
    }
    Ok(())
}

/// A place in the document: its JSON path and value (`None` when absent or null).
struct Field<'a> {
    path: String,
    value: Option<&'a Value>,
    reading: &'a Reading,
}

/// What one read of a CR noted besides the configuration: the paths it looked at (present ones
/// only) and the settings it understood but could not apply.
#[derive(Default)]
struct Reading {
    seen: RefCell<BTreeSet<String>>,
    skipped: RefCell<Vec<NotApplied>>,
}

impl<'a> Field<'a> {
    fn root(doc: &'a Value, reading: &'a Reading) -> Self {
        Field {
            path: String::new(),
            value: Some(doc),
            reading,
        }
    }

    /// Notes that this setting is left out (the rest of the CR still applies).
    fn skip(&self, reason: String) {
        self.reading.skipped.borrow_mut().push(NotApplied {
            path: self.path.clone(),
            reason,
        });
    }

    fn wrong(&self, expected: &'static str) -> KubevirtCrError {
        KubevirtCrError::WrongType {
            path: self.path.clone(),
            expected,
        }
    }

    fn invalid(&self, reason: String) -> KubevirtCrError {
        KubevirtCrError::Invalid {
            path: self.path.clone(),
            reason,
        }
    }

    /// The member `key`; absent when this field is absent. A field that has members but is not
    /// an object is a type error.
    fn get(&self, key: &str) -> Result<Field<'a>, KubevirtCrError> {
        let path = if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        };
        match self.value {
            None => Ok(Field {
                path,
                value: None,
                reading: self.reading,
            }),
            Some(Value::Object(map)) => {
                let value = map.get(key).filter(|v| !v.is_null());
                if value.is_some() {
                    self.reading.seen.borrow_mut().insert(path.clone());
                }
                Ok(Field {
                    path,
                    value,
                    reading: self.reading,
                })
            }
            Some(_) => Err(self.wrong("an object")),
        }
    }

    fn keys(&self) -> Result<Vec<String>, KubevirtCrError> {
        match self.value {
            None => Ok(Vec::new()),
            Some(Value::Object(map)) => Ok(map.keys().cloned().collect()),
            Some(_) => Err(self.wrong("an object")),
        }
    }

    fn array(&self) -> Result<Vec<Option<&'a Value>>, KubevirtCrError> {
        match self.value {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items.iter().map(Some).collect()),
            Some(_) => Err(self.wrong("a list")),
        }
    }

    fn string(&self) -> Result<Option<String>, KubevirtCrError> {
        match self.value {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.wrong("a string")),
        }
    }

    fn boolean(&self) -> Result<Option<bool>, KubevirtCrError> {
        match self.value {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.wrong("true or false")),
        }
    }

    fn integer(&self) -> Result<Option<i64>, KubevirtCrError> {
        match self.value {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| self.wrong("an integer")),
            Some(_) => Err(self.wrong("an integer")),
        }
    }

    fn unsigned(&self) -> Result<Option<u32>, KubevirtCrError> {
        match self.value {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.wrong("a non-negative integer (32 bits)")),
            Some(_) => Err(self.wrong("a non-negative integer (32 bits)")),
        }
    }

    /// A Kubernetes quantity, written as a string (`100m`) or a number (`1`).
    fn quantity(&self) -> Result<Option<String>, KubevirtCrError> {
        let text = match self.value {
            None => return Ok(None),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => return Err(self.wrong("a quantity (e.g. \"100m\")")),
        };
        Quantity::new(text.clone())
            .milli_value()
            .map_err(|e| self.invalid(format!("{text:?} is not a quantity: {e}")))?;
        Ok(Some(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cr(configuration: Value) -> Value {
        json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"configuration": configuration},
        })
    }

    fn config(configuration: Value) -> ClusterConfig {
        cluster_config_from_kubevirt_cr(&cr(configuration)).unwrap()
    }

    fn error(configuration: Value) -> KubevirtCrError {
        cluster_config_from_kubevirt_cr(&cr(configuration)).unwrap_err()
    }

    #[test]
    fn an_empty_configuration_is_kubevirts_default() {
        assert_eq!(config(json!({})), ClusterConfig::default());
        let bare = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt"});
        assert_eq!(
            cluster_config_from_kubevirt_cr(&bare).unwrap(),
            ClusterConfig::default()
        );
    }

    #[test]
    fn developer_configuration_is_read() {
        let c = config(json!({"developerConfiguration": {
            "featureGates": ["Sidecar", "HostDisk"],
            "useEmulation": true,
            "cpuAllocationRatio": 4,
            "memoryOvercommit": 150,
            "pvcTolerateLessSpaceUpToPercent": 5,
        }}));
        assert_eq!(
            c.feature_gates.iter().collect::<Vec<_>>(),
            ["HostDisk", "Sidecar"]
        );
        assert!(c.use_emulation);
        assert_eq!(c.cpu_allocation_ratio, 4);
        assert_eq!(c.memory_overcommit_percent, 150);
    }

    #[test]
    fn zero_values_keep_the_defaults_as_in_kubevirt() {
        let c = config(json!({
            "developerConfiguration": {"cpuAllocationRatio": 0, "memoryOvercommit": 0, "useEmulation": false},
            "liveUpdateConfiguration": {"maxHotplugRatio": 0},
            "smbios": {"product": ""},
            "network": {"defaultNetworkInterface": ""},
        }));
        assert_eq!(c, ClusterConfig::default());
        // memBalloonStatsPeriod is a pointer in KubeVirt: 0 is a value (statistics off).
        assert_eq!(
            config(json!({"memBalloonStatsPeriod": 0})).mem_balloon_stats_period,
            0
        );
    }

    #[test]
    fn the_rest_of_the_modelled_fields_are_read() {
        let c = config(json!({
            "cpuRequest": "250m",
            "architectureConfiguration": {
                "defaultArchitecture": "arm64",
                "amd64": {"machineType": "pc-q35-rhel9.4.0", "ovmfPath": "/x"},
                "arm64": {"machineType": "virt"},
            },
            "network": {"defaultNetworkInterface": "masquerade", "permitBridgeInterfaceOnPodNetwork": false},
            "smbios": {"manufacturer": "Acme", "sku": "A1"},
            "memBalloonStatsPeriod": 30,
            "additionalGuestMemoryOverheadRatio": "1.5",
            "liveUpdateConfiguration": {"maxHotplugRatio": 2, "maxCpuSockets": 8},
            "vmRolloutStrategy": "Stage",
            "migrations": {"parallelMigrationsPerCluster": 3},
        }));
        assert_eq!(c.cpu_request, "250m");
        assert_eq!(c.architecture, "arm64");
        assert_eq!(c.machine_type, "pc-q35-rhel9.4.0");
        assert_eq!(c.default_network_interface, "masquerade");
        assert_eq!(c.smbios.manufacturer, "Acme");
        assert_eq!(c.smbios.sku, "A1");
        assert_eq!(c.smbios.family, "KubeVirt");
        assert_eq!(c.smbios.product, "None");
        assert_eq!(c.mem_balloon_stats_period, 30);
        assert_eq!(
            c.additional_guest_memory_overhead_ratio.as_deref(),
            Some("1.5")
        );
        assert_eq!(c.max_hotplug_ratio, 2);
        assert!(!c.live_update);
        assert_eq!(config(json!({"cpuRequest": 1})).cpu_request, "1");
        assert!(config(json!({"vmRolloutStrategy": "LiveUpdate"})).live_update);
        assert_eq!(
            config(json!({"machineType": "pc-q35-8.0"})).machine_type,
            "pc-q35-8.0"
        );
    }

    #[test]
    fn network_binding_plugins_are_kept_by_name() {
        let doc = cr(json!({"network": {"binding": {
            "passt": {"sidecarImage": "quay.io/kubevirt/network-passt-binding:v1.9.0", "networkAttachmentDefinition": "default/netbindingpasst", "migration": {"method": "link-refresh"}},
            "managedtap": {"domainAttachmentType": "managedTap"},
        }}}));
        let read = read_kubevirt_cr(&doc).unwrap();
        assert_eq!(
            read.network_bindings.keys().collect::<Vec<_>>(),
            ["managedtap", "passt"]
        );
        assert_eq!(
            read.network_bindings["managedtap"]
                .domain_attachment_type
                .as_deref(),
            Some("managedTap")
        );
        assert!(read.network_bindings["passt"].migration);
        assert!(!read.network_bindings["managedtap"].migration);
        assert_eq!(read.config, ClusterConfig::default());
    }

    #[test]
    fn emulated_machines_are_read_per_architecture_and_cluster_wide() {
        let c = config(json!({"architectureConfiguration": {
            "amd64": {"emulatedMachines": ["q35*", "pc-i440fx*"]}
        }}));
        assert_eq!(c.emulated_machines("amd64"), ["q35*", "pc-i440fx*"]);
        assert_eq!(c.emulated_machines("arm64"), ["virt*"]);
        let c = config(json!({"emulatedMachines": ["pc*"]}));
        assert_eq!(c.emulated_machines("s390x"), ["pc*"]);
        let err = error(json!({"emulatedMachines": ["q35*", 7]}));
        assert_eq!(
            err.to_string(),
            "spec.configuration.emulatedMachines[1]: expected a string"
        );
    }

    #[test]
    fn a_modelled_field_of_the_wrong_type_names_its_path() {
        let cases = [
            (
                json!({"developerConfiguration": {"cpuAllocationRatio": "4"}}),
                "spec.configuration.developerConfiguration.cpuAllocationRatio: expected an integer",
            ),
            (
                json!({"developerConfiguration": {"cpuAllocationRatio": 1.5}}),
                "spec.configuration.developerConfiguration.cpuAllocationRatio: expected an integer",
            ),
            (
                json!({"developerConfiguration": {"useEmulation": "yes"}}),
                "spec.configuration.developerConfiguration.useEmulation: expected true or false",
            ),
            (
                json!({"developerConfiguration": {"featureGates": "Sidecar"}}),
                "spec.configuration.developerConfiguration.featureGates: expected a list",
            ),
            (
                json!({"developerConfiguration": {"featureGates": ["Sidecar", 3]}}),
                "spec.configuration.developerConfiguration.featureGates[1]: expected a feature gate name (a string)",
            ),
            (
                json!({"developerConfiguration": []}),
                "spec.configuration.developerConfiguration: expected an object",
            ),
            (
                json!({"memBalloonStatsPeriod": -1}),
                "spec.configuration.memBalloonStatsPeriod: expected a non-negative integer (32 bits)",
            ),
            (
                json!({"additionalGuestMemoryOverheadRatio": 1.5}),
                "spec.configuration.additionalGuestMemoryOverheadRatio: expected a string",
            ),
            (
                json!({"network": {"binding": {"passt": "yes"}}}),
                "spec.configuration.network.binding.passt: expected an object (a network binding plugin)",
            ),
            (
                json!({"smbios": {"sku": 7}}),
                "spec.configuration.smbios.sku: expected a string",
            ),
        ];
        for (conf, want) in cases {
            let err = error(conf);
            assert_eq!(err.to_string(), want);
            assert_eq!(err.label(), "wrong_type");
        }
        let top = cluster_config_from_kubevirt_cr(
            &json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "spec": 1}),
        );
        assert_eq!(top.unwrap_err().to_string(), "spec: expected an object");
    }

    #[test]
    fn values_kubevirt_refuses_are_refused() {
        let cases = [
            (
                json!({"developerConfiguration": {"cpuAllocationRatio": -2}}),
                "spec.configuration.developerConfiguration.cpuAllocationRatio: the cpu allocation ratio must be positive, got -2",
            ),
            (
                json!({"developerConfiguration": {"memoryOvercommit": -1}}),
                "spec.configuration.developerConfiguration.memoryOvercommit: the memory overcommit must be positive, got -1",
            ),
            (
                json!({"network": {"defaultNetworkInterface": "passt"}}),
                "spec.configuration.network.defaultNetworkInterface: \"passt\" is not a default network interface KubeVirt accepts (bridge, masquerade, slirp)",
            ),
            (
                json!({"additionalGuestMemoryOverheadRatio": "0.5"}),
                "spec.configuration.additionalGuestMemoryOverheadRatio: \"0.5\" cannot be smaller than 1.0",
            ),
            (
                json!({"vmRolloutStrategy": "Rolling"}),
                "spec.configuration.vmRolloutStrategy: \"Rolling\" is not LiveUpdate or Stage",
            ),
            (
                json!({"developerConfiguration": {"featureGates": ["Sidecar"], "disabledFeatureGates": ["Sidecar"]}}),
                "spec.configuration.developerConfiguration.disabledFeatureGates[0]: feature gate \"Sidecar\" is both in featureGates and disabledFeatureGates",
            ),
        ];
        for (conf, want) in cases {
            let err = error(conf);
            assert_eq!(err.to_string(), want);
            assert_eq!(err.label(), "invalid_value");
        }
        let err = error(json!({"cpuRequest": "lots"}));
        assert!(
            err.to_string()
                .starts_with("spec.configuration.cpuRequest: \"lots\" is not a quantity"),
            "{err}"
        );
    }

    #[test]
    fn unknown_gates_are_named_with_their_index() {
        let err =
            error(json!({"developerConfiguration": {"featureGates": ["Sidecar", "hostdisk"]}}));
        assert_eq!(err.label(), "unknown_feature_gate");
        let text = err.to_string();
        assert!(text.starts_with("spec.configuration.developerConfiguration.featureGates[1]: unknown feature gate \"hostdisk\", did you mean \"HostDisk\"?"), "{text}");
    }

    fn not_applied(configuration: Value) -> (ClusterConfig, Vec<String>) {
        let read = read_kubevirt_cr(&cr(configuration)).unwrap();
        let notes = read.not_applied.iter().map(ToString::to_string).collect();
        (read.config, notes)
    }

    #[test]
    fn what_kvrs_cannot_honour_is_left_out_and_the_rest_applies() {
        let (c, notes) = not_applied(json!({
            "architectureConfiguration": {"arm64": {"machineType": "virt-8.2"}},
            "smbios": {"sku": "A"},
        }));
        assert_eq!(
            notes,
            [
                "spec.configuration.architectureConfiguration.arm64.machineType (kvrs gives arm64 guests the machine type \"virt\", not \"virt-8.2\")"
            ]
        );
        assert_eq!(c.smbios.sku, "A", "the rest of the CR applies");
        let (c, notes) = not_applied(
            json!({"developerConfiguration": {"disabledFeatureGates": ["ImageVolume"]}}),
        );
        assert_eq!(
            notes,
            [
                "spec.configuration.developerConfiguration.disabledFeatureGates[0] (kvrs cannot turn off the beta feature gate \"ImageVolume\" yet: it stays on)"
            ]
        );
        assert_eq!(c, ClusterConfig::default());
        // An alpha gate is off anyway, a GA one cannot be turned off: both are no-ops.
        assert_eq!(
            not_applied(
                json!({"developerConfiguration": {"disabledFeatureGates": ["Sidecar", "NUMA"]}})
            ),
            (ClusterConfig::default(), vec![])
        );
        let (c, notes) = not_applied(
            json!({"machineType": "pc", "architectureConfiguration": {"defaultArchitecture": "s390x"}}),
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("spec.configuration.machineType (kvrs applies a cluster-wide machine type to amd64 guests only"), "{notes:?}");
        assert_eq!(
            (c.architecture.as_str(), c.machine_type.as_str()),
            ("s390x", ClusterConfig::default().machine_type.as_str())
        );
        let err = error(json!({"architectureConfiguration": {"defaultArchitecture": "riscv64"}}));
        assert_eq!(err.label(), "invalid_value");
    }

    #[test]
    fn settings_no_daemon_reads_are_listed_once_each_and_never_block_the_rest() {
        let (c, notes) = not_applied(json!({
            "migrations": {"parallelMigrationsPerCluster": 2, "bandwidthPerMigration": "64Mi", "network": "migration-net"},
            "developerConfiguration": {"useEmulation": true, "logVerbosity": {"virtHandler": 4}},
            "network": {"binding": {"passt": {"sidecarImage": "quay.io/passt", "migration": {"method": "link-refresh"}}}},
            "permittedHostDevices": null,
            "seccompConfiguration": {},
            "virtualMachineOptions": {"disableSerialConsoleLog": {}},
            "tlsConfiguration": {"minTLSVersion": "VersionTLS12"},
        }));
        assert!(c.use_emulation, "what kvrs reads still applies");
        assert_eq!(
            notes,
            [
                "spec.configuration.migrations.network (kvrs does not act on this migration setting yet: it only reaches migrationConfiguration)",
                "spec.configuration.developerConfiguration.logVerbosity (no kvrs component reads this setting yet)",
                "spec.configuration.tlsConfiguration (no kvrs component reads this setting yet)",
            ],
            "null and empty settings set nothing; an option object read whole (a binding's migration, disableSerialConsoleLog) is read; the migration limits apply"
        );
        assert_eq!(not_applied(json!({})).1, Vec::<String>::new());
    }

    #[test]
    fn the_migration_limits_are_checked_and_the_other_migration_settings_listed() {
        let err = error(json!({"migrations": {"parallelMigrationsPerCluster": "five"}}));
        assert!(
            err.to_string()
                .contains("spec.configuration.migrations.parallelMigrationsPerCluster"),
            "{err}"
        );
        let (_, notes) = not_applied(json!({"migrations": {
            "parallelMigrationsPerCluster": 2,
            "parallelOutboundMigrationsPerNode": 1,
            "allowPostCopy": true,
            "network": "migration-net",
        }}));
        assert_eq!(
            notes,
            [format!(
                "spec.configuration.migrations.network ({MIGRATION_NOT_CARRIED_OUT})"
            )],
            "the limits and what a migration carries (allowPostCopy) apply"
        );
    }

    #[test]
    fn only_a_kubevirt_cr_is_read() {
        let vm = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine"});
        let err = cluster_config_from_kubevirt_cr(&vm).unwrap_err();
        assert_eq!(err.to_string(), "kind: \"VirtualMachine\" is not KubeVirt");
        assert_eq!(err.label(), "not_kubevirt_cr");
        let other = json!({"apiVersion": "example.com/v1", "kind": "KubeVirt"});
        assert_eq!(
            cluster_config_from_kubevirt_cr(&other)
                .unwrap_err()
                .to_string(),
            "apiVersion: \"example.com/v1\" is not kubevirt.io/v1"
        );
        assert_eq!(
            cluster_config_from_kubevirt_cr(&json!([1]))
                .unwrap_err()
                .to_string(),
            "(top level): expected a KubeVirt object"
        );
    }
}
