//! The VirtualMachineInstanceMigration webhooks (KubeVirt's `MigrationCreateMutator`,
//! `MigrationCreateAdmitter`, `MigrationUpdateAdmitter`).
//!
//! - **mutate, CREATE**: the selector label `kubevirt.io/vmi-name` and the finalizer
//!   `kubevirt.io/migrationJobFinalize`.
//! - **validate, CREATE**: `spec.vmiName` is set; only virt-controller sets a priority; the VMI
//!   exists, is not final and is not marked non-migratable; no other migration of it is in
//!   flight ([`Facts`], read by the shell); a decentralized migration needs its gate and one
//!   migration ID.
//! - **validate, UPDATE**: the spec is frozen; the selector label stays while the migration is
//!   in flight.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::VirtualMachineInstance;
use serde::Deserialize;
use serde_json::Value;

use super::{Context, Facts, Lookup};
use crate::response::{bad_request, cause, denied, patch_between, read_object};
use crate::review::{AdmissionRequest, Operation, Verdict};

const RESOURCE: &str = "virtualmachineinstancemigrations";
/// The label naming a migration's VMI.
pub const MIGRATION_SELECTOR_LABEL: &str = "kubevirt.io/vmi-name";
/// The finalizer of a migration.
pub const MIGRATION_FINALIZER: &str = "kubevirt.io/migrationJobFinalize";

/// The fields of a migration the webhooks read.
#[derive(Debug, Default, Deserialize)]
struct Migration {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: MigrationSpec,
    #[serde(default)]
    status: Option<MigrationStatus>,
}

#[derive(Debug, Default, Deserialize)]
struct MigrationSpec {
    #[serde(rename = "vmiName", default)]
    vmi_name: String,
    #[serde(default)]
    priority: Option<Value>,
    #[serde(rename = "sendTo", default)]
    send_to: Option<MigrationId>,
    #[serde(default)]
    receive: Option<MigrationId>,
}

#[derive(Debug, Default, Deserialize)]
struct MigrationId {
    #[serde(rename = "migrationID", default)]
    migration_id: String,
}

#[derive(Debug, Default, Deserialize)]
struct MigrationStatus {
    #[serde(default)]
    phase: String,
}

impl Migration {
    fn phase(&self) -> &str {
        self.status.as_ref().map_or("", |s| s.phase.as_str())
    }

    fn is_final(&self) -> bool {
        matches!(self.phase(), "Succeeded" | "Failed")
    }

    fn is_decentralized(&self) -> bool {
        self.spec.send_to.is_some() != self.spec.receive.is_some()
    }
}

fn read(req: &AdmissionRequest, what: &str) -> Result<Migration, Verdict> {
    if !req.is_kubevirt_resource(RESOURCE) {
        return Err(bad_request(format!(
            "expect resource to be 'kubevirt.io/v1, Resource={RESOURCE}'"
        )));
    }
    let object = if what == "oldObject" {
        req.old_object.as_ref()
    } else {
        req.object.as_ref()
    };
    read_object(what, object)
}

pub(super) fn mutate(req: &AdmissionRequest) -> Verdict {
    if req.operation != Operation::Create {
        return Verdict::allow();
    }
    let migration = match read(req, "object") {
        Ok(m) => m,
        Err(v) => return v,
    };
    let mut meta = migration.metadata;
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(MIGRATION_SELECTOR_LABEL.into(), migration.spec.vmi_name);
    meta.finalizers
        .get_or_insert_with(Vec::new)
        .push(MIGRATION_FINALIZER.into());
    let (Some(original), Ok(meta)) = (req.object.as_ref(), serde_json::to_value(&meta)) else {
        return Verdict::allow();
    };
    let admitted = serde_json::json!({"metadata": meta});
    Verdict::allow_patched(patch_between(original, &admitted, &["metadata"]))
}

pub(super) fn lookup(req: &AdmissionRequest) -> Option<Lookup> {
    let migration = read(req, "object").ok()?;
    if migration.spec.vmi_name.is_empty() {
        return None;
    }
    let namespace = migration
        .metadata
        .namespace
        .filter(|n| !n.is_empty())
        .or_else(|| req.namespace.clone())?;
    Some(Lookup::MigrationTarget {
        namespace,
        vmi_name: migration.spec.vmi_name,
    })
}

pub(super) fn validate_create(req: &AdmissionRequest, ctx: &Context<'_>, facts: &Facts) -> Verdict {
    let migration = match read(req, "object") {
        Ok(m) => m,
        Err(v) => return v,
    };
    let name = migration.spec.vmi_name.as_str();
    if name.is_empty() {
        return denied(vec![cause(
            "FieldValueRequired",
            "vmiName is missing",
            "spec.vmiName",
        )]);
    }
    if migration.spec.priority.is_some() && req.user_info.username != ctx.controller_account {
        return denied(vec![cause(
            "FieldValueForbidden",
            "Migration priority queue, only virt-controller is allowed to set priority field",
            "spec.migrationPriority",
        )]);
    }
    if let Some(e) = &facts.error {
        return bad_request(e.clone());
    }
    let namespace = migration
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| req.namespace.clone())
        .unwrap_or_default();
    let Some(vmi) = &facts.vmi else {
        return bad_request(format!("the VMI \"{namespace}/{name}\" does not exist"));
    };
    let vmi: VirtualMachineInstance = match read_object("VMI", Some(vmi)) {
        Ok(v) => v,
        Err(v) => return v,
    };
    let status = vmi.status.clone().unwrap_or_default();
    if matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")) {
        return bad_request("Cannot migrate VMI in finalized state.");
    }
    for c in status.conditions.iter().flatten() {
        if c.r#type == "LiveMigratable" && c.status == "False" {
            let reason = c.reason.as_deref().unwrap_or("");
            if reason == "DisksNotLiveMigratable" && migration.is_decentralized() {
                continue;
            }
            return bad_request(format!(
                "Cannot migrate VMI, Reason: {reason}, Message: {}",
                c.message.as_deref().unwrap_or("")
            ));
        }
    }
    for other in &facts.migrations {
        let Ok(other) = serde_json::from_value::<Migration>(other.clone()) else {
            continue;
        };
        if !other.is_final() {
            return bad_request(format!(
                "in-flight migration detected. Active migration job ({}) is currently already in progress for VMI {}.",
                other.metadata.uid.as_deref().unwrap_or(""),
                other.spec.vmi_name
            ));
        }
    }
    if migration.spec.send_to.is_some() || migration.spec.receive.is_some() {
        if !kvrs_admission::validate::gate_enabled(ctx.config, "DecentralizedLiveMigration") {
            return denied(vec![cause(
                "FieldValueNotSupported",
                "DecentralizedLiveMigration feature gate is not enabled in kubevirt resource",
                "",
            )]);
        }
        if let (Some(s), Some(r)) = (&migration.spec.send_to, &migration.spec.receive)
            && s.migration_id != r.migration_id
        {
            return denied(vec![cause(
                "FieldValueInvalid",
                format!(
                    "sendTo migrationID {} does not match receive migrationID {}",
                    s.migration_id, r.migration_id
                ),
                "",
            )]);
        }
    }
    Verdict::allow()
}

pub(super) fn validate_update(req: &AdmissionRequest) -> Verdict {
    let (new, old) = match (read(req, "object"), read(req, "oldObject")) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(v), _) | (_, Err(v)) => return v,
    };
    let spec = |v: Option<&Value>| {
        v.and_then(|o| o.get("spec"))
            .cloned()
            .unwrap_or(Value::Null)
    };
    if spec(req.object.as_ref()) != spec(req.old_object.as_ref()) {
        return denied(vec![cause(
            "FieldValueNotSupported",
            "update of Migration object's spec is restricted",
            "",
        )]);
    }
    if !new.is_final()
        && let Some(old_labels) = &old.metadata.labels
        && let Some(old_label) = old_labels.get(MIGRATION_SELECTOR_LABEL)
    {
        let new_label = new
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MIGRATION_SELECTOR_LABEL));
        let message = match (&new.metadata.labels, new_label) {
            (None, _) => Some("selector label can't be removed from an in-flight migration"),
            (Some(_), Some(l)) if l == old_label => None,
            (Some(_), _) => Some("selector label can't be modified on an in-flight migration"),
        };
        if let Some(message) = message {
            return denied(vec![cause("FieldValueNotSupported", message, "")]);
        }
    }
    Verdict::allow()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{CONTROLLER, Req, patched};
    use super::super::{Webhook, lookup as lookup_of};
    use super::*;

    fn migration() -> Value {
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "m", "namespace": "default"}, "spec": {"vmiName": "a"}})
    }

    fn running_vmi() -> Value {
        json!({"metadata": {"name": "a", "namespace": "default"},
            "spec": {"domain": {"devices": {}}}, "status": {"phase": "Running"}})
    }

    fn facts(vmi: Option<Value>, migrations: Vec<Value>) -> Facts {
        Facts {
            vmi,
            migrations,
            ..Facts::default()
        }
    }

    #[test]
    fn create_labels_and_finalizes_the_migration() {
        let input = migration();
        let v = Req::create(RESOURCE, input.clone()).send(Webhook::MigrationMutateCreate);
        let out = patched(&input, &v);
        assert_eq!(
            out["metadata"]["labels"],
            json!({"kubevirt.io/vmi-name": "a"})
        );
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["kubevirt.io/migrationJobFinalize"])
        );
        assert_eq!(out["spec"], input["spec"]);
    }

    #[test]
    fn create_asks_for_the_vmi_and_its_migrations() {
        let req = Req::create(RESOURCE, migration()).request();
        assert_eq!(
            lookup_of(Webhook::MigrationValidateCreate, &req),
            Some(Lookup::MigrationTarget {
                namespace: "default".into(),
                vmi_name: "a".into()
            })
        );
        assert_eq!(lookup_of(Webhook::MigrationMutateCreate, &req), None);
    }

    #[test]
    fn create_needs_a_named_existing_migratable_idle_vmi() {
        let send = |m: Value, f: Facts| {
            Req::create(RESOURCE, m).send_with(Webhook::MigrationValidateCreate, &f)
        };
        let ok = facts(Some(running_vmi()), vec![]);
        assert!(send(migration(), ok.clone()).allowed);

        let mut unnamed = migration();
        unnamed["spec"]["vmiName"] = json!("");
        assert_eq!(send(unnamed, ok.clone()).message(), "vmiName is missing");

        let mut prioritized = migration();
        prioritized["spec"]["priority"] = json!("user-triggered");
        assert_eq!(
            send(prioritized.clone(), ok.clone()).message(),
            "Migration priority queue, only virt-controller is allowed to set priority field"
        );
        let by_controller = Req::create(RESOURCE, prioritized)
            .by(CONTROLLER)
            .send_with(Webhook::MigrationValidateCreate, &ok);
        assert!(by_controller.allowed);

        let v = send(migration(), facts(None, vec![]));
        assert_eq!(v.message(), "the VMI \"default/a\" does not exist");
        assert_eq!(v.status.unwrap().code, 400);

        let mut done = running_vmi();
        done["status"]["phase"] = json!("Succeeded");
        assert_eq!(
            send(migration(), facts(Some(done), vec![])).message(),
            "Cannot migrate VMI in finalized state."
        );

        let mut pinned = running_vmi();
        pinned["status"]["conditions"] = json!([{"type": "LiveMigratable", "status": "False",
            "reason": "DisksNotLiveMigratable", "message": "local disk"}]);
        assert_eq!(
            send(migration(), facts(Some(pinned), vec![])).message(),
            "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: local disk"
        );

        let busy = json!({"metadata": {"uid": "u-7"}, "spec": {"vmiName": "a"},
            "status": {"phase": "Running"}});
        let finished = json!({"metadata": {"uid": "u-6"}, "spec": {"vmiName": "a"},
            "status": {"phase": "Succeeded"}});
        assert!(
            send(
                migration(),
                facts(Some(running_vmi()), vec![finished.clone()])
            )
            .allowed
        );
        assert_eq!(
            send(
                migration(),
                facts(Some(running_vmi()), vec![finished, busy])
            )
            .message(),
            "in-flight migration detected. Active migration job (u-7) is currently already in progress for VMI a."
        );
    }

    #[test]
    fn a_decentralized_migration_needs_its_gate() {
        let mut m = migration();
        m["spec"]["sendTo"] = json!({"migrationID": "x", "connectURL": "u"});
        let v = Req::create(RESOURCE, m).send_with(
            Webhook::MigrationValidateCreate,
            &facts(Some(running_vmi()), vec![]),
        );
        assert_eq!(
            v.message(),
            "DecentralizedLiveMigration feature gate is not enabled in kubevirt resource"
        );
    }

    #[test]
    fn update_freezes_the_spec_and_the_selector_label_in_flight() {
        let mut old = migration();
        old["metadata"]["labels"] = json!({"kubevirt.io/vmi-name": "a"});
        let mut respec = old.clone();
        respec["spec"]["vmiName"] = json!("b");
        let v = Req::update(RESOURCE, old.clone(), respec).send(Webhook::MigrationValidateUpdate);
        assert_eq!(
            v.message(),
            "update of Migration object's spec is restricted"
        );

        let mut relabel = old.clone();
        relabel["metadata"]["labels"] = json!({"kubevirt.io/vmi-name": "b"});
        let v = Req::update(RESOURCE, old.clone(), relabel.clone())
            .send(Webhook::MigrationValidateUpdate);
        assert_eq!(
            v.message(),
            "selector label can't be modified on an in-flight migration"
        );
        let mut unlabel = old.clone();
        unlabel["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        let v = Req::update(RESOURCE, old.clone(), unlabel).send(Webhook::MigrationValidateUpdate);
        assert_eq!(
            v.message(),
            "selector label can't be removed from an in-flight migration"
        );
        relabel["status"] = json!({"phase": "Succeeded"});
        assert!(
            Req::update(RESOURCE, old, relabel)
                .send(Webhook::MigrationValidateUpdate)
                .allowed
        );
    }
}
