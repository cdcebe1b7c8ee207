//! The cluster configuration as it changes while a daemon runs: which KubeVirt CR counts, the
//! command-line flags laid over it, and KubeVirt's "keep the last good one" — plain functions and
//! a small state machine; the daemons' watch feeds it the CRs it sees.
//!
//! KubeVirt v1.9.0 (`pkg/virt-config/configuration.go`, `ClusterConfig.GetConfig`) reads the
//! configuration of the KubeVirt CR in its install namespace that is not being deleted and that
//! virt-operator accepted (a non-empty `status.phase`). A CR at a resourceVersion it already
//! read is not read again; a CR whose configuration is invalid is logged once for that version
//! and the last valid configuration stays; with no such CR the last valid configuration stays
//! (the built-in default until one was read).
//!
//! kvrs does the same, with two additions. A cluster that runs kvrs's daemons without
//! virt-operator (as `bins/deploy` installs them) has nobody to set `status.phase`, and the
//! daemons never write the CR: when no CR of the namespace has a phase, the one CR not being
//! deleted counts; with several, none does (which is KubeVirt's answer too), and that is
//! reported. And a refusal is reported once per distinct error rather than once per
//! resourceVersion, so an edit that keeps the same mistake does not report it again.
//!
//! A CR kvrs understands in part is applied in that part: what it leaves out comes with the
//! update ([`KubevirtCr::not_applied`]) and is flagged for reporting once per CR and list.
//!
//! Flags stay as overrides ([`Overrides`]): `--feature-gates` adds to the CR's gates,
//! `--allow-emulation` forces `useEmulation` on (without it the CR decides), `--launcher-image`
//! is the launcher image (the CR has none: virt-operator hands it to virt-controller as this same
//! flag), and `--virt-api-webhooks` is not a CR setting at all.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::kubevirt_cr::{KubevirtCr, KubevirtCrError, NotApplied, read_kubevirt_cr};

/// What a daemon's flags lay over the CR's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--feature-gates`: enabled in addition to the CR's.
    pub feature_gates: BTreeSet<String>,
    /// `--allow-emulation`: `useEmulation` is on whatever the CR says; `false` leaves it to the CR.
    pub allow_emulation: bool,
    /// `--launcher-image` (virt-controller): the image rendered into launcher pods.
    pub launcher_image: Option<String>,
    /// Whether the VM controller stores each VMI as virt-api's webhook would return it
    /// (virt-controller without `--virt-api-webhooks`).
    pub admit_created_vmis: bool,
}

impl Overrides {
    /// `read` with the flags laid over it.
    pub fn apply(&self, read: &KubevirtCr) -> KubevirtCr {
        let mut out = read.clone();
        let config = &mut out.config;
        config
            .feature_gates
            .extend(self.feature_gates.iter().cloned());
        config.use_emulation |= self.allow_emulation;
        if let Some(image) = &self.launcher_image {
            config.launcher_image.clone_from(image);
        }
        config.admit_created_vmis = self.admit_created_vmis;
        out
    }
}

/// KubeVirt's configuration with an empty `spec.configuration`.
pub fn default_kubevirt_cr() -> KubevirtCr {
    KubevirtCr {
        config: crate::ClusterConfig::default(),
        network_bindings: Default::default(),
        daemon: Default::default(),
        not_applied: Vec::new(),
    }
}

/// Namespace, name and UID of a KubeVirt CR, for logs and events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// resourceVersion.
    pub resource_version: String,
}

impl CrRef {
    fn of(cr: &Value) -> Self {
        let text = |key: &str| cr["metadata"][key].as_str().unwrap_or_default().to_string();
        Self {
            namespace: text("namespace"),
            name: text("name"),
            uid: text("uid"),
            resource_version: text("resourceVersion"),
        }
    }
}

/// Which of the KubeVirt CRs of a namespace gives the configuration.
#[derive(Debug, PartialEq)]
pub enum Chosen<'a> {
    /// None: the last valid configuration stays.
    None,
    /// This one.
    One(&'a Value),
    /// Several without a phase (no virt-operator to accept one): none counts, as in KubeVirt.
    Several(Vec<String>),
}

/// The CR among `crs` (the KubeVirt CRs of the install namespace) that gives the configuration;
/// see the module documentation.
pub fn choose_kubevirt_cr(crs: &[Value]) -> Chosen<'_> {
    let live: Vec<&Value> = crs
        .iter()
        .filter(|cr| cr["metadata"]["deletionTimestamp"].is_null())
        .collect();
    let accepted: Vec<&Value> = live
        .iter()
        .copied()
        .filter(|cr| {
            cr["status"]["phase"]
                .as_str()
                .is_some_and(|p| !p.is_empty())
        })
        .collect();
    // virt-operator accepts one CR per install; were there several, KubeVirt would take whichever
    // its cache lists last. The oldest is the one virt-operator installed from.
    if let Some(oldest) = accepted.iter().min_by_key(|cr| {
        (
            cr["metadata"]["creationTimestamp"].as_str().unwrap_or(""),
            cr["metadata"]["name"].as_str().unwrap_or(""),
        )
    }) {
        return Chosen::One(oldest);
    }
    match live.as_slice() {
        [] => Chosen::None,
        [one] => Chosen::One(one),
        several => {
            let mut names: Vec<String> = several
                .iter()
                .map(|cr| cr["metadata"]["name"].as_str().unwrap_or("").to_string())
                .collect();
            names.sort();
            Chosen::Several(names)
        }
    }
}

/// What changed after the daemon saw the CRs again.
#[derive(Debug, PartialEq)]
pub enum ConfigChange {
    /// Nothing to do: the configuration in use stays.
    Unchanged,
    /// A new valid configuration, flags already laid over it.
    Updated {
        /// The CR it came from.
        cr: CrRef,
        /// The effective configuration; its `not_applied` lists what of the CR was left out.
        config: Box<KubevirtCr>,
        /// True the first time this CR leaves out this list of settings (report it: a log line
        /// and an event naming them); an edit that leaves out the same ones is not reported again.
        report_not_applied: bool,
    },
    /// The chosen CR's configuration is refused; the last good one stays. `report` is true the
    /// first time this error is seen (log it, record the event, count it).
    Refused {
        /// The CR.
        cr: CrRef,
        /// Why.
        error: KubevirtCrError,
        /// The resourceVersion of the configuration still in use (`None`: the default).
        last_good: Option<String>,
        /// Whether to report it.
        report: bool,
    },
    /// Several CRs and none accepted by virt-operator: none counts, the last good configuration
    /// stays. `report` is true the first time this set of names is seen.
    Ambiguous {
        /// Their names, sorted.
        names: Vec<String>,
        /// Whether to report it.
        report: bool,
    },
}

/// KubeVirt's `ClusterConfig.GetConfig` as a state machine (see the module documentation).
#[derive(Debug, Default)]
pub struct ConfigTracker {
    overrides: Overrides,
    /// resourceVersion of the CR the configuration in use came from.
    last_valid: Option<String>,
    /// resourceVersion of the last refused CR.
    last_invalid: Option<String>,
    /// The last problem reported (CR UID and message), so it is reported once.
    reported: Option<(String, String)>,
    /// The settings left out of the configuration in use, last reported (CR UID and list).
    reported_not_applied: Option<(String, Vec<NotApplied>)>,
}

impl ConfigTracker {
    /// A tracker laying `overrides` over every configuration it reads.
    pub fn new(overrides: Overrides) -> Self {
        Self {
            overrides,
            ..Self::default()
        }
    }

    /// The configuration before any CR was read: KubeVirt's default with the flags over it.
    pub fn initial(&self) -> KubevirtCr {
        self.overrides.apply(&default_kubevirt_cr())
    }

    /// Looks at the KubeVirt CRs of the install namespace as they are now.
    pub fn observe(&mut self, crs: &[Value]) -> ConfigChange {
        let cr = match choose_kubevirt_cr(crs) {
            Chosen::None => return ConfigChange::Unchanged,
            Chosen::Several(names) => {
                let report = self.first_report(String::new(), names.join(","));
                return ConfigChange::Ambiguous { names, report };
            }
            Chosen::One(cr) => cr,
        };
        let id = CrRef::of(cr);
        let rv = Some(id.resource_version.clone());
        if rv == self.last_valid || rv == self.last_invalid {
            return ConfigChange::Unchanged;
        }
        match read_kubevirt_cr(&with_type(cr)) {
            Ok(read) => {
                self.last_valid = rv;
                self.reported = None;
                let left_out = Some((id.uid.clone(), read.not_applied.clone()));
                let report_not_applied =
                    !read.not_applied.is_empty() && self.reported_not_applied != left_out;
                self.reported_not_applied = left_out;
                ConfigChange::Updated {
                    cr: id,
                    config: Box::new(self.overrides.apply(&read)),
                    report_not_applied,
                }
            }
            Err(error) => {
                self.last_invalid = rv;
                let report = self.first_report(id.uid.clone(), error.to_string());
                ConfigChange::Refused {
                    cr: id,
                    error,
                    last_good: self.last_valid.clone(),
                    report,
                }
            }
        }
    }

    fn first_report(&mut self, uid: String, message: String) -> bool {
        let problem = Some((uid, message));
        let first = self.reported != problem;
        self.reported = problem;
        first
    }
}

/// The CR with its `apiVersion` and `kind` (a list's items may come without them).
fn with_type(cr: &Value) -> Value {
    let mut cr = cr.clone();
    if let Some(map) = cr.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String("kubevirt.io/v1".into()));
        map.entry("kind")
            .or_insert_with(|| Value::String("KubeVirt".into()));
    }
    cr
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kv(name: &str, rv: &str, configuration: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "kubevirt", "uid": format!("uid-{name}"),
            "resourceVersion": rv, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"configuration": configuration}})
    }

    fn updated(change: ConfigChange) -> KubevirtCr {
        match change {
            ConfigChange::Updated { config, .. } => *config,
            other => panic!("expected an update, got {other:?}"),
        }
    }

    #[test]
    fn flags_add_gates_force_emulation_and_set_the_image() {
        let mut t = ConfigTracker::new(Overrides {
            feature_gates: ["Sidecar".to_string()].into(),
            allow_emulation: true,
            launcher_image: Some("kvrs/virt-launcher:dev".into()),
            admit_created_vmis: true,
        });
        let c = updated(t.observe(&[kv(
            "kubevirt",
            "1",
            json!({"developerConfiguration": {"featureGates": ["HostDisk"], "useEmulation": false},
                   "smbios": {"manufacturer": "Acme"}}),
        )]))
        .config;
        assert_eq!(
            c.feature_gates.iter().collect::<Vec<_>>(),
            ["HostDisk", "Sidecar"]
        );
        assert!(
            c.use_emulation,
            "--allow-emulation wins over the CR's false"
        );
        assert_eq!(c.launcher_image, "kvrs/virt-launcher:dev");
        assert!(c.admit_created_vmis);
        assert_eq!(c.smbios.manufacturer, "Acme");
    }

    #[test]
    fn without_flags_the_cr_decides_and_without_a_cr_the_default_holds() {
        let mut t = ConfigTracker::new(Overrides::default());
        assert_eq!(t.initial(), default_kubevirt_cr());
        assert_eq!(t.observe(&[]), ConfigChange::Unchanged);
        let c = updated(t.observe(&[kv(
            "kubevirt",
            "1",
            json!({"developerConfiguration": {"useEmulation": true}}),
        )]));
        assert!(c.config.use_emulation);
        assert_eq!(
            c.config.launcher_image,
            crate::ClusterConfig::default().launcher_image
        );
        // Gone (KubeVirt: the last valid configuration stays).
        assert_eq!(t.observe(&[]), ConfigChange::Unchanged);
    }

    #[test]
    fn an_invalid_configuration_keeps_the_last_good_one_and_is_reported_once() {
        let mut t = ConfigTracker::new(Overrides::default());
        updated(t.observe(&[kv("kubevirt", "1", json!({"smbios": {"sku": "A"}}))]));
        let bad = json!({"developerConfiguration": {"cpuAllocationRatio": -1}});
        let refused = t.observe(&[kv("kubevirt", "2", bad.clone())]);
        let ConfigChange::Refused {
            error,
            last_good,
            report,
            cr,
        } = refused
        else {
            panic!("expected a refusal, got {refused:?}");
        };
        assert!(report);
        assert_eq!(last_good.as_deref(), Some("1"));
        assert_eq!(cr.name, "kubevirt");
        assert_eq!(
            error.to_string(),
            "spec.configuration.developerConfiguration.cpuAllocationRatio: the cpu allocation ratio must be positive, got -1"
        );
        // A relist of the same version: nothing at all.
        assert_eq!(
            t.observe(&[kv("kubevirt", "2", bad.clone())]),
            ConfigChange::Unchanged
        );
        // Another edit with the same mistake: refused, not reported again.
        assert!(matches!(
            t.observe(&[kv("kubevirt", "3", bad.clone())]),
            ConfigChange::Refused { report: false, .. }
        ));
        // A different mistake is reported.
        assert!(matches!(
            t.observe(&[kv("kubevirt", "4", json!({"imagePullPolicy": "Sometimes"}))]),
            ConfigChange::Refused { report: true, .. }
        ));
        // Fixed, then the first mistake again: reported again.
        updated(t.observe(&[kv("kubevirt", "5", json!({}))]));
        assert!(matches!(
            t.observe(&[kv("kubevirt", "6", bad)]),
            ConfigChange::Refused { report: true, last_good: Some(ref rv), .. } if rv == "5"
        ));
    }

    #[test]
    fn a_cr_understood_in_part_applies_and_what_is_left_out_is_reported_once() {
        let mut t = ConfigTracker::new(Overrides::default());
        let partial = json!({"smbios": {"sku": "A"}, "migrations": {"network": "migration-net"}});
        let ConfigChange::Updated {
            config,
            report_not_applied,
            ..
        } = t.observe(&[kv("kubevirt", "1", partial.clone())])
        else {
            panic!("a CR understood in part still applies");
        };
        assert!(report_not_applied);
        assert_eq!(config.config.smbios.sku, "A");
        assert_eq!(
            config.not_applied[0].path,
            "spec.configuration.migrations.network"
        );
        // Another edit leaving out the same setting: applied, not reported again.
        let mut edited = partial.clone();
        edited["smbios"]["sku"] = json!("B");
        assert!(matches!(
            t.observe(&[kv("kubevirt", "2", edited)]),
            ConfigChange::Updated { report_not_applied: false, ref config, .. } if config.config.smbios.sku == "B"
        ));
        // Everything understood: nothing to report; leaving it out again is news.
        assert!(matches!(
            t.observe(&[kv("kubevirt", "3", json!({}))]),
            ConfigChange::Updated {
                report_not_applied: false,
                ..
            }
        ));
        assert!(matches!(
            t.observe(&[kv("kubevirt", "4", partial)]),
            ConfigChange::Updated {
                report_not_applied: true,
                ..
            }
        ));
    }

    #[test]
    fn the_accepted_cr_wins_and_several_unaccepted_ones_give_none() {
        let mut accepted = kv("b", "2", json!({"smbios": {"sku": "B"}}));
        accepted["status"] = json!({"phase": "Deployed"});
        let other = kv("a", "1", json!({"smbios": {"sku": "A"}}));
        assert_eq!(
            choose_kubevirt_cr(&[other.clone(), accepted.clone()]),
            Chosen::One(&accepted)
        );
        let mut deleting = accepted.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-02T00:00:00Z");
        assert_eq!(
            choose_kubevirt_cr(&[other.clone(), deleting.clone()]),
            Chosen::One(&other)
        );
        let third = kv("c", "3", json!({}));
        assert_eq!(
            choose_kubevirt_cr(&[third.clone(), other.clone()]),
            Chosen::Several(vec!["a".into(), "c".into()])
        );
        let mut t = ConfigTracker::new(Overrides::default());
        assert!(matches!(
            t.observe(&[third.clone(), other.clone()]),
            ConfigChange::Ambiguous { report: true, .. }
        ));
        assert!(matches!(
            t.observe(&[other, third]),
            ConfigChange::Ambiguous { report: false, .. }
        ));
    }
}
