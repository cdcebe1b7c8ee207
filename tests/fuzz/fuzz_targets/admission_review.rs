//! The bodies virt-api's webhooks read (`kvrs_virt_api::handle`: an AdmissionReview as the API
//! server sends it, for one of the webhooks). Input: one byte choosing the webhook, then the
//! body. Asserts: no panic; an answer with status 200 is an `admission.k8s.io/v1`
//! AdmissionReview echoing the request's UID; a patch decodes from base64 into a JSON patch
//! that applies to the request's object; every other answer is a 400 naming what is wrong.
#![no_main]

use std::collections::BTreeSet;

use base64::Engine;
use kvrs_admission::ClusterConfig;
use kvrs_api::time::Now;
use kvrs_virt_api::webhooks::{Context, Facts, Webhook};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(
    init: {
        kvrs_fuzz::seeds::write_if_asked(seeds);
    },
    |data: &[u8]| {
        let Some((&which, body)) = data.split_first() else {
            return;
        };
        let webhook = Webhook::ALL[usize::from(which) % Webhook::ALL.len()];
        let config = ClusterConfig::default();
        let accounts = BTreeSet::from(["system:serviceaccount:kubevirt:kvrs-controller".to_string()]);
        let ctx = Context {
            config: &config,
            service_accounts: &accounts,
            controller_account: "system:serviceaccount:kubevirt:kvrs-controller",
            handler_account: "system:serviceaccount:kubevirt:kvrs-handler",
            now: Now::from_unix(1_700_000_000),
            fresh_uuids: ["u1".into(), "u2".into()],
        };
        let reply = kvrs_virt_api::handle(webhook, body, &ctx, &Facts::default());
        if reply.status != 200 {
            assert_eq!(reply.status, 400, "only a 400 for an unreadable body");
            assert!(!reply.body.is_empty(), "a 400 says why");
            return;
        }
        let out: Value = serde_json::from_slice(&reply.body).expect("the answer is JSON");
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
        // A 200 answers one JSON document. Strings the webhook never reads may hold escapes
        // `Value` refuses (a lone surrogate `\udc00`, which Go's decoder, and so KubeVirt's,
        // also accepts): only a body `Value` reads is compared further.
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            assert!(out["response"]["uid"].is_string(), "the UID is echoed");
            return;
        };
        assert_eq!(out["response"]["uid"], request["request"]["uid"], "the UID is echoed");
        if let Some(patch) = out["response"]["patch"].as_str() {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(patch)
                .expect("the patch is base64");
            let patch: json_patch::Patch = serde_json::from_slice(&raw).expect("a JSON patch");
            let mut object = request["request"]["object"].clone();
            json_patch::patch(&mut object, &patch).expect("the patch applies to the object");
        }
    }
);

/// Every oracle VMI as a CREATE review of the VMI mutating (byte 1) and create-validating
/// (byte 3) webhooks, plus a malformed body.
fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for json in kvrs_fuzz::seeds::oracle_files(".vmi.json") {
        let Ok(object) = serde_json::from_slice::<Value>(&json) else {
            continue;
        };
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "seed", "operation": "CREATE", "namespace": "default",
                "resource": {"group": "kubevirt.io", "version": "v1",
                    "resource": "virtualmachineinstances"},
                "userInfo": {"username": "fuzz"}, "object": object},
        });
        for which in [1u8, 3] {
            let mut seed = vec![which];
            seed.extend(review.to_string().into_bytes());
            out.push(seed);
        }
    }
    out.push(b"\x00{\"apiVersion\":\"admission.k8s.io/v1\"".to_vec());
    out
}
