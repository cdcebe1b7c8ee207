//! MigrationPolicies (`migrations.kubevirt.io/v1alpha1`): which one applies to a VMI and what it
//! changes in the migration configuration virt-handler runs the migration with (KubeVirt
//! v1.9.0's `watch/migration/migrationpolicy.go`).
//!
//! A policy selects VMIs by their labels and their namespace's labels; the most specific match
//! wins (most matching labels, then most matching VMI labels, then the lexicographically first
//! name), so a policy for "this kind of VM in this team's namespaces" beats one for "this team".
//! The winner's set fields replace the cluster's configuration field by field.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// Labels, as selectors and objects carry them.
pub type Labels = BTreeMap<String, String>;

/// A MigrationPolicy as the matcher reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationPolicy {
    /// Its name (it ends up in the VMI's `status.migrationState.migrationPolicyName`).
    pub name: String,
    /// `spec.selectors` (`None`: the policy matches nothing, as in KubeVirt).
    pub selectors: Option<Selectors>,
    /// `spec`, whose set configuration fields override the cluster's.
    pub spec: Map<String, Value>,
}

/// `spec.selectors`. `None` and an empty map differ, as Go's nil and empty maps do.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Selectors {
    /// Labels the VMI's namespace must carry.
    #[serde(rename = "namespaceSelector", default)]
    pub namespace: Option<Labels>,
    /// Labels the VMI must carry.
    #[serde(rename = "virtualMachineInstanceSelector", default)]
    pub vmi: Option<Labels>,
}

/// Why a MigrationPolicy object cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// It has no `metadata.name`.
    #[error("migration policy: metadata.name: missing")]
    NoName,
    /// `spec` is missing or not an object.
    #[error("migration policy {0}: spec: missing or not an object")]
    NoSpec(String),
    /// `spec.selectors` is not a map of label maps.
    #[error("migration policy {name}: spec.selectors: {reason}")]
    Selectors {
        /// The policy.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

impl PolicyError {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            PolicyError::NoName => "policy_no_name",
            PolicyError::NoSpec(_) => "policy_no_spec",
            PolicyError::Selectors { .. } => "policy_bad_selectors",
        }
    }
}

impl MigrationPolicy {
    /// Reads a policy object as the API server returns it.
    pub fn from_value(v: &Value) -> Result<Self, PolicyError> {
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or(PolicyError::NoName)?
            .to_string();
        let Some(Value::Object(spec)) = v.get("spec") else {
            return Err(PolicyError::NoSpec(name));
        };
        let selectors = match spec.get("selectors") {
            None | Some(Value::Null) => None,
            Some(s) => Some(
                Selectors::deserialize(s).map_err(|e| PolicyError::Selectors {
                    name: name.clone(),
                    reason: e.to_string(),
                })?,
            ),
        };
        Ok(Self {
            name,
            selectors,
            spec: spec.clone(),
        })
    }
}

/// How specifically a policy matches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Score {
    vmi: usize,
    namespace: usize,
}

impl Score {
    fn total(self) -> usize {
        self.vmi + self.namespace
    }

    /// More labels in all, then more VMI labels.
    fn beats(self, other: Score) -> bool {
        if self.total() == other.total() {
            self.vmi > other.vmi
        } else {
            self.total() > other.total()
        }
    }
}

/// KubeVirt's `countMatchingLabels`: whether `policy` selects the VMI, and how specifically.
///
/// Kept as KubeVirt has it, quirks included: a VMI without labels is matched by every policy
/// that has selectors (neither selector is checked), and the namespace selector is checked only
/// when the *VMI* has labels.
fn score(
    policy: &MigrationPolicy,
    vmi: Option<&Labels>,
    namespace: Option<&Labels>,
) -> Option<Score> {
    let selectors = policy.selectors.as_ref()?;
    let count = |wanted: &Labels, have: &Labels| -> Option<usize> {
        wanted
            .iter()
            .all(|(k, v)| have.get(k) == Some(v))
            .then_some(wanted.len())
    };
    let mut s = Score::default();
    let Some(vmi_labels) = vmi else {
        return Some(s);
    };
    if let Some(wanted) = &selectors.vmi {
        s.vmi = count(wanted, vmi_labels)?;
    }
    if let Some(wanted) = &selectors.namespace {
        s.namespace = count(wanted, namespace.unwrap_or(&Labels::new()))?;
    }
    Some(s)
}

/// KubeVirt's `matchPolicy`: the most specific policy selecting a VMI with labels `vmi` in a
/// namespace with labels `namespace`; ties go to the lexicographically first name.
pub fn match_policy<'p>(
    policies: &'p [MigrationPolicy],
    vmi: Option<&Labels>,
    namespace: Option<&Labels>,
) -> Option<&'p MigrationPolicy> {
    let mut best: Option<(Score, &MigrationPolicy)> = None;
    for p in policies {
        let Some(s) = score(p, vmi, namespace) else {
            continue;
        };
        best = match best {
            None => Some((s, p)),
            Some((b, bp)) if s.beats(b) || (s == b && p.name < bp.name) => Some((s, p)),
            keep => keep,
        };
    }
    best.map(|(_, p)| p)
}

/// KubeVirt's `applyMigrationPolicySpec`: `base` (the cluster's configuration, as the VMI's
/// `migrationConfiguration` carries it) with every field the policy sets replaced.
/// `allowWorkloadDisruption` follows `allowPostCopy` when the policy sets only the latter.
pub fn apply_policy(base: &Map<String, Value>, spec: &Map<String, Value>) -> Map<String, Value> {
    let mut out = base.clone();
    let set = |k: &str| spec.get(k).filter(|v| !v.is_null());
    if set("allowWorkloadDisruption").is_none()
        && let Some(v) = set("allowPostCopy")
    {
        out.insert("allowWorkloadDisruption".into(), v.clone());
    }
    for k in [
        "allowAutoConverge",
        "bandwidthPerMigration",
        "completionTimeoutPerGiB",
        "maxDowntimeMs",
        "allowPostCopy",
        "allowWorkloadDisruption",
    ] {
        if let Some(v) = set(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(Value::Object(exp)) = set("experimental") {
        let mut merged = match out.get("experimental") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        if let Some(Value::Object(stall)) = exp.get("stallDetector") {
            let mut s = match merged.get("stallDetector") {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            for (k, v) in stall.iter().filter(|(_, v)| !v.is_null()) {
                s.insert(k.clone(), v.clone());
            }
            merged.insert("stallDetector".into(), Value::Object(s));
        }
        if let Some(c) = exp.get("compression").filter(|v| !v.is_null()) {
            merged.insert("compression".into(), c.clone());
        }
        out.insert("experimental".into(), Value::Object(merged));
    }
    super::config::canonicalize_bandwidth(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(name: &str, selectors: Value, spec: Value) -> MigrationPolicy {
        let mut s = spec;
        s["selectors"] = selectors;
        MigrationPolicy::from_value(&json!({"metadata": {"name": name}, "spec": s})).unwrap()
    }

    fn labels(v: Value) -> Labels {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_policy_matching_most_labels_wins() {
        let vmi = labels(json!({"workload": "db", "tier": "gold"}));
        let ns = labels(json!({"team": "a"}));
        let ps = [
            policy(
                "one",
                json!({"virtualMachineInstanceSelector": {"workload": "db"}}),
                json!({}),
            ),
            policy(
                "two",
                json!({"virtualMachineInstanceSelector": {"workload": "db"},
                                 "namespaceSelector": {"team": "a"}}),
                json!({}),
            ),
            policy(
                "miss",
                json!({"virtualMachineInstanceSelector": {"workload": "web"}}),
                json!({}),
            ),
        ];
        assert_eq!(
            match_policy(&ps, Some(&vmi), Some(&ns)).unwrap().name,
            "two"
        );
    }

    #[test]
    fn on_a_tie_vmi_labels_beat_namespace_labels_then_names_decide() {
        let vmi = labels(json!({"workload": "db"}));
        let ns = labels(json!({"team": "a"}));
        let ps = [
            policy(
                "by-namespace",
                json!({"namespaceSelector": {"team": "a"}}),
                json!({}),
            ),
            policy(
                "by-vmi",
                json!({"virtualMachineInstanceSelector": {"workload": "db"}}),
                json!({}),
            ),
        ];
        assert_eq!(
            match_policy(&ps, Some(&vmi), Some(&ns)).unwrap().name,
            "by-vmi"
        );
        let ps = [
            policy(
                "zeta",
                json!({"virtualMachineInstanceSelector": {"workload": "db"}}),
                json!({}),
            ),
            policy(
                "alpha",
                json!({"virtualMachineInstanceSelector": {"workload": "db"}}),
                json!({}),
            ),
        ];
        assert_eq!(
            match_policy(&ps, Some(&vmi), Some(&ns)).unwrap().name,
            "alpha"
        );
    }

    #[test]
    fn a_selector_with_one_missing_label_does_not_match() {
        let vmi = labels(json!({"workload": "db"}));
        let ns = labels(json!({"team": "a"}));
        let ps = [policy(
            "p",
            json!({"virtualMachineInstanceSelector": {"workload": "db", "tier": "gold"}}),
            json!({}),
        )];
        assert_eq!(match_policy(&ps, Some(&vmi), Some(&ns)), None);
        let ps = [policy(
            "p",
            json!({"namespaceSelector": {"team": "b"}}),
            json!({}),
        )];
        assert_eq!(match_policy(&ps, Some(&vmi), Some(&ns)), None);
    }

    #[test]
    fn kubevirts_quirks_are_kept() {
        let ns = labels(json!({"team": "a"}));
        // No selectors: matches nothing.
        let none =
            MigrationPolicy::from_value(&json!({"metadata": {"name": "n"}, "spec": {}})).unwrap();
        assert_eq!(
            match_policy(std::slice::from_ref(&none), None, Some(&ns)),
            None
        );
        // A VMI without labels: every policy with selectors matches, with no score.
        let ps = [
            policy(
                "b",
                json!({"virtualMachineInstanceSelector": {"workload": "db"}}),
                json!({}),
            ),
            policy("a", json!({"namespaceSelector": {"team": "z"}}), json!({})),
        ];
        assert_eq!(match_policy(&ps, None, Some(&ns)).unwrap().name, "a");
        // Empty selectors match every labelled VMI.
        let ps = [policy("empty", json!({}), json!({}))];
        let vmi = labels(json!({"x": "y"}));
        assert_eq!(
            match_policy(&ps, Some(&vmi), Some(&ns)).unwrap().name,
            "empty"
        );
    }

    #[test]
    fn a_policy_overrides_only_what_it_sets() {
        let base = crate::migration::MigrationConfig::default().options;
        let spec = json!({"bandwidthPerMigration": "64Mi", "completionTimeoutPerGiB": 300,
                          "allowAutoConverge": true, "allowPostCopy": true});
        let out = apply_policy(&base, spec.as_object().unwrap());
        assert_eq!(out["bandwidthPerMigration"], "64Mi");
        assert_eq!(out["completionTimeoutPerGiB"], 300);
        assert_eq!(out["allowAutoConverge"], true);
        assert_eq!(out["allowPostCopy"], true);
        // Follows allowPostCopy, as the policy does not set it.
        assert_eq!(out["allowWorkloadDisruption"], true);
        assert_eq!(out["progressTimeout"], base["progressTimeout"]);
        assert_eq!(
            out["parallelMigrationsPerCluster"],
            base["parallelMigrationsPerCluster"]
        );
        let spec = json!({"allowPostCopy": true, "allowWorkloadDisruption": false});
        let out = apply_policy(&base, spec.as_object().unwrap());
        assert_eq!(out["allowWorkloadDisruption"], false);
    }

    #[test]
    fn experimental_options_merge_field_by_field() {
        let mut base = Map::new();
        base.insert(
            "experimental".into(),
            json!({"stallDetector": {"stallMargin": 2}, "compression": "none"}),
        );
        let spec = json!({"experimental": {"stallDetector": {"ewmaAlpha": "0.5"}}});
        let out = apply_policy(&base, spec.as_object().unwrap());
        assert_eq!(
            out["experimental"],
            json!({"stallDetector": {"stallMargin": 2, "ewmaAlpha": "0.5"}, "compression": "none"})
        );
    }

    /// The hand-off writes the matched policy's configuration and name into the VMI's
    /// migration state (KubeVirt's `matchMigrationPolicy` in `handleTargetPodHandoff`).
    #[test]
    fn the_hand_off_carries_the_policy_of_the_vmi() {
        use crate::migration::fixtures::{Scene, patch_of};
        let policies = vec![
            policy(
                "slow",
                json!({"virtualMachineInstanceSelector": {"workload": "db"},
                                  "namespaceSelector": {"team": "a"}}),
                json!({"bandwidthPerMigration": "64Mi", "completionTimeoutPerGiB": 300,
                          "allowAutoConverge": true, "allowPostCopy": true}),
            ),
            policy(
                "other-team",
                json!({"namespaceSelector": {"team": "b"}}),
                json!({"allowAutoConverge": false}),
            ),
        ];
        let namespaces = BTreeMap::from([("default".to_string(), labels(json!({"team": "a"})))]);
        let mut s = Scene::new("Scheduled").target("Running");
        s.migration["status"]["migrationState"] = json!({"sourcePod": "virt-launcher-vmi1-src"});
        s.vmi()["metadata"]["labels"] = json!({"workload": "db"});
        s.config = s
            .config
            .clone()
            .with_policies(policies.clone(), namespaces.clone());
        let d = s.decide();
        let state = &patch_of(&d, "virtualmachineinstances")[1]["value"];
        assert_eq!(state["migrationPolicyName"], "slow");
        let c = &state["migrationConfiguration"];
        assert_eq!(c["bandwidthPerMigration"], "64Mi");
        assert_eq!(c["completionTimeoutPerGiB"], 300);
        assert_eq!(c["allowAutoConverge"], true);
        assert_eq!(c["allowPostCopy"], true);
        assert_eq!(c["allowWorkloadDisruption"], true);
        assert_eq!(
            c["progressTimeout"], 150,
            "the cluster's where the policy is silent"
        );

        // A VMI no policy selects keeps the cluster's configuration and gets no policy name.
        let mut s = Scene::new("Scheduled").target("Running");
        s.migration["status"]["migrationState"] = json!({"sourcePod": "virt-launcher-vmi1-src"});
        s.vmi()["metadata"]["labels"] = json!({"workload": "web"});
        s.config = s.config.clone().with_policies(policies, namespaces);
        let d = s.decide();
        let state = &patch_of(&d, "virtualmachineinstances")[1]["value"];
        assert!(state.get("migrationPolicyName").is_none(), "{state}");
        assert_eq!(
            state["migrationConfiguration"]["bandwidthPerMigration"], "0",
            "KubeVirt's default 0Mi, as Go writes the quantity"
        );
    }

    #[test]
    fn malformed_policies_are_refused_with_a_typed_error() {
        assert_eq!(
            MigrationPolicy::from_value(&json!({"spec": {}})),
            Err(PolicyError::NoName)
        );
        assert_eq!(
            MigrationPolicy::from_value(&json!({"metadata": {"name": "p"}})),
            Err(PolicyError::NoSpec("p".into()))
        );
        let e = MigrationPolicy::from_value(&json!({"metadata": {"name": "p"},
            "spec": {"selectors": {"namespaceSelector": ["x"]}}}))
        .unwrap_err();
        assert_eq!(e.label(), "policy_bad_selectors");
        assert!(
            e.to_string()
                .starts_with("migration policy p: spec.selectors: "),
            "{e}"
        );
    }
}
