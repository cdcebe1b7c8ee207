//! The oracle scenario format (`../shared/oracle-handler/*.json`) in and the oracle output shape
//! out, so `kvrs decide handler`, the oracle test and users' tools share one reader and one writer.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::plan::HandlerPlan;
use super::status::prune_empty;
use super::{Domain, HandlerConfig, HandlerWorld, NodeFacts, decide, format_time};
use crate::ApiWrite;
use crate::api::VirtualMachineInstance;

pub use super::plan::status_write;
use crate::small_json::ScanPointer;

/// Why a scenario could not be read; names the field.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// A field has the wrong shape.
    #[error("{field}: {reason}")]
    Field {
        /// JSON path of the field.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

fn field_err(field: &str, reason: impl ToString) -> ScenarioError {
    ScenarioError::Field {
        field: field.into(),
        reason: reason.to_string(),
    }
}

/// A parsed handler scenario.
#[derive(Clone, Debug)]
pub struct HandlerScenario {
    /// The node the handler runs on.
    pub node: String,
    /// Queue key.
    pub key: String,
    /// Virtual clock.
    pub now: Timestamp,
    /// The stored VMI, if any.
    pub vmi: Option<VirtualMachineInstance>,
    /// The reported domain, if any.
    pub domain: Option<Domain>,
    /// Node-local facts.
    pub facts: NodeFacts,
    /// Cluster settings.
    pub config: HandlerConfig,
}

impl HandlerScenario {
    /// Reads a scenario object (see the oracle README for the fields).
    pub fn from_json(v: &Value) -> Result<Self, ScenarioError> {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        let now_text = s("now").unwrap_or("2026-01-01T00:00:00Z");
        let now: Timestamp = now_text.parse().map_err(|e| field_err("now", e))?;
        let vmi: Option<VirtualMachineInstance> = match v.get("vmi") {
            None | Some(Value::Null) => None,
            Some(x) => Some(serde_json::from_value(x.clone()).map_err(|e| field_err("vmi", e))?),
        };
        let domain: Option<Domain> = match v.get("domain") {
            None | Some(Value::Null) => None,
            Some(x) => Some(serde_json::from_value(x.clone()).map_err(|e| field_err("domain", e))?),
        };
        let facts: NodeFacts = match v.get("extra") {
            None | Some(Value::Null) => NodeFacts::default(),
            Some(x) => serde_json::from_value(x.clone()).map_err(|e| field_err("extra", e))?,
        };
        let key = match s("key") {
            Some(k) => k.to_string(),
            None => {
                if let Some(vmi) = &vmi {
                    format!(
                        "{}/{}",
                        vmi.metadata.namespace.as_deref().unwrap_or(""),
                        vmi.metadata.name.as_deref().unwrap_or("")
                    )
                } else if let Some(d) = &domain {
                    format!("{}/{}", d.meta.namespace, d.meta.name)
                } else {
                    return Err(field_err(
                        "key",
                        "no key, vmi or domain to name the queue key",
                    ));
                }
            }
        };
        let mut config = HandlerConfig::default();
        if let Some(m) = s("hostCpuModel") {
            config.host_cpu_model = m.to_string();
        }
        config.feature_gates = match v.get("featureGates") {
            Some(Value::String(g)) => g
                .split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        };
        if let Some(kv) = v.get("kubevirtConfiguration") {
            if let Some(gates) = kv
                .at("/developerConfiguration/featureGates")
                .and_then(Value::as_array)
            {
                config
                    .feature_gates
                    .extend(gates.iter().filter_map(Value::as_str).map(str::to_string));
            }
            if let Some(es) = kv.get("evictionStrategy").and_then(Value::as_str) {
                config.eviction_strategy = Some(es.to_string());
            }
        }
        Ok(Self {
            node: s("node").unwrap_or("node01").to_string(),
            key,
            now,
            vmi,
            domain,
            facts,
            config,
        })
    }

    /// The world the decision sees.
    pub fn world(&self) -> HandlerWorld<'_> {
        HandlerWorld {
            node: &self.node,
            key: &self.key,
            now: crate::Now::from_timestamp(self.now),
            vmi: self.vmi.as_ref(),
            domain: self.domain.as_ref(),
            facts: &self.facts,
            config: &self.config,
        }
    }

    /// Runs the decision.
    pub fn decide(&self) -> HandlerPlan {
        decide(&self.world())
    }

    fn names(&self) -> (String, String) {
        let (ns, name) = self.key.split_once('/').unwrap_or(("", self.key.as_str()));
        (ns.to_string(), name.to_string())
    }

    /// The status write of `plan`, if any (see [`status_write`]).
    pub fn status_write<'p>(&self, plan: &'p HandlerPlan) -> Option<&'p ApiWrite> {
        plan.plan.writes().last()
    }

    /// The plan in the oracle's `NAME.out.json` shape (plus `nodeSteps`).
    pub fn to_oracle_json(&self, plan: &HandlerPlan) -> Value {
        let mut out = Map::new();
        out.insert("controller".into(), json!("kvrs-handler"));
        out.insert("node".into(), json!(self.node));
        out.insert("key".into(), json!(self.key));
        out.insert("now".into(), json!(format_time(self.now)));
        out.insert(
            "decision".into(),
            serde_json::to_value(plan.decision).unwrap_or_default(),
        );
        out.insert(
            "launcherCalls".into(),
            json!(
                plan.launcher_calls()
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
            ),
        );
        out.insert(
            "nodeSteps".into(),
            serde_json::to_value(plan.node_steps()).unwrap_or_default(),
        );
        let actions: Vec<Value> = self
            .status_write(plan)
            .into_iter()
            .map(ApiWrite::to_json)
            .collect();
        out.insert("actions".into(), Value::Array(actions));
        let (ns, name) = self.names();
        let events: Vec<Value> = plan
            .plan
            .events
            .iter()
            .map(|e| {
                json!({
                    "object": format!("VirtualMachineInstance {ns}/{name}"),
                    "type": e.kind.as_str(), "reason": e.reason, "message": e.message,
                })
            })
            .collect();
        out.insert("events".into(), Value::Array(events));
        out.insert("queue".into(), plan.plan.queue.to_json(&self.key));
        out.insert("requeued".into(), json!(plan.requeued()));
        if let Some(s) = plan.requeue_after() {
            out.insert("requeueAfterSeconds".into(), json!(s));
        }
        if let Some(e) = plan.plan.error_message() {
            out.insert("error".into(), json!(e));
        }
        out.insert("statusUpdated".into(), json!(plan.status.is_some()));
        if let Some(s) = &plan.status {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            prune_empty(&mut v);
            out.insert("vmiStatus".into(), v);
        }
        Value::Object(out)
    }
}
