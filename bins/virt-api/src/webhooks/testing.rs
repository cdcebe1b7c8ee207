//! Builders for the webhooks' unit tests: a request reads like the scenario
//! (`Req::create("virtualmachineinstances", vmi).by(USER)`).

use std::collections::BTreeSet;
use std::sync::LazyLock;

use kvrs_admission::ClusterConfig;
use kvrs_api::time::Now;
use serde_json::{Value, json};

use super::{Context, Facts, Webhook, admit};
use crate::review::{AdmissionRequest, Verdict, decode};

pub const CONTROLLER: &str = "system:serviceaccount:kubevirt:kvrs-controller";
pub const HANDLER: &str = "system:serviceaccount:kubevirt:kvrs-handler";
pub const USER: &str = "alice";

pub static ACCOUNTS: LazyLock<BTreeSet<String>> = LazyLock::new(|| {
    [CONTROLLER, HANDLER]
        .into_iter()
        .map(String::from)
        .collect()
});

pub static CONFIG: LazyLock<ClusterConfig> = LazyLock::new(ClusterConfig::default);

pub fn ctx(config: &ClusterConfig) -> Context<'_> {
    Context {
        config,
        service_accounts: &ACCOUNTS,
        controller_account: CONTROLLER,
        handler_account: HANDLER,
        now: Now::from_unix(1_700_000_000),
        fresh_uuids: [
            "11111111-1111-4111-8111-111111111111".into(),
            "22222222-2222-4222-8222-222222222222".into(),
        ],
    }
}

/// A request under construction.
pub struct Req(Value);

impl Req {
    fn new(op: &str, group: &str, resource: &str, object: Value) -> Req {
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        Req(json!({
            "uid": "req-1", "operation": op, "namespace": ns, "name": name,
            "resource": {"group": group, "version": "v1", "resource": resource},
            "userInfo": {"username": USER},
            "object": object,
        }))
    }

    pub fn create(resource: &str, object: Value) -> Req {
        Req::new("CREATE", "kubevirt.io", resource, object)
    }

    pub fn update(resource: &str, old: Value, new: Value) -> Req {
        let mut r = Req::new("UPDATE", "kubevirt.io", resource, new);
        r.0["oldObject"] = old;
        r
    }

    pub fn instancetype(resource: &str, object: Value) -> Req {
        let mut r = Req::new("CREATE", "instancetype.kubevirt.io", resource, object);
        r.0["resource"]["version"] = json!("v1beta1");
        r
    }

    pub fn by(mut self, username: &str) -> Req {
        self.0["userInfo"]["username"] = json!(username);
        self
    }

    pub fn namespace(mut self, ns: &str) -> Req {
        self.0["namespace"] = json!(ns);
        self
    }

    pub fn extra(mut self, key: &str, values: &[&str]) -> Req {
        self.0["userInfo"]["extra"][key] = json!(values);
        self
    }

    pub fn request(&self) -> AdmissionRequest {
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": self.0});
        decode(body.to_string().as_bytes()).expect("a well-formed review")
    }

    pub fn send(&self, webhook: Webhook) -> Verdict {
        self.send_with(webhook, &Facts::default())
    }

    pub fn send_config(&self, webhook: Webhook, config: &ClusterConfig) -> Verdict {
        admit(webhook, &self.request(), &ctx(config), &Facts::default())
    }

    pub fn send_with(&self, webhook: Webhook, facts: &Facts) -> Verdict {
        admit(webhook, &self.request(), &ctx(&CONFIG), facts)
    }
}

/// The object after the verdict's patch.
pub fn patched(object: &Value, verdict: &Verdict) -> Value {
    let mut out = object.clone();
    if let Some(p) = &verdict.patch {
        json_patch::patch(&mut out, p).expect("the patch applies to the object");
    }
    out
}

pub fn vmi() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "a", "namespace": "default"},
        "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}},
    })
}

pub fn vm() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "a", "namespace": "default"},
        "spec": {"runStrategy": "Halted", "template": {"metadata": {}, "spec": {
            "domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}}}},
    })
}
