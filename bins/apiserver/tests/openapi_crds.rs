//! The served OpenAPI documents (kube-apiserver's, dumped with kvrs's CRDs installed) are the
//! CRDs of `bins/deploy/crds` as they are now: every served version's schema is there, with
//! the same fields at every level. When the CRDs are regenerated, this fails until the
//! documents are dumped again (`dump_openapi` in `tests/differential.rs`).

use std::path::Path;

use serde_json::Value;

/// Every object path of a schema (`spec.template.spec.domain`), arrays as `[]`.
fn field_paths(s: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let p = format!("{path}.{k}");
            out.push(p.clone());
            field_paths(v, &p, out);
        }
    }
    if let Some(items) = s.get("items") {
        field_paths(items, &format!("{path}[]"), out);
    }
    if let Some(a) = s.get("additionalProperties").filter(|a| a.is_object()) {
        field_paths(a, &format!("{path}{{}}"), out);
    }
}

#[test]
fn the_served_documents_carry_the_crds_schemas() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let crds = root.join("../deploy/crds");
    for entry in std::fs::read_dir(&crds).unwrap() {
        let path = entry.unwrap().path();
        let crd: Value = serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let group = crd["spec"]["group"].as_str().unwrap();
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
        for v in crd["spec"]["versions"].as_array().unwrap() {
            let version = v["name"].as_str().unwrap();
            let file = root.join(format!("openapi/apis__{group}__{version}.json"));
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue; // a version this server does not serve (kubevirt.io/v1alpha3)
            };
            let doc: Value = serde_json::from_str(&text).unwrap();
            let schemas = doc["components"]["schemas"].as_object().unwrap();
            let served = schemas.values().find(|s| {
                s["x-kubernetes-group-version-kind"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|g| g["kind"] == kind && g["version"] == version)
            });
            let served = served.unwrap_or_else(|| panic!("{kind} {version} in {}", file.display()));
            let (mut want, mut have) = (Vec::new(), Vec::new());
            let crd_schema = &v["schema"]["openAPIV3Schema"];
            for top in ["spec", "status"] {
                field_paths(&crd_schema["properties"][top], top, &mut want);
                field_paths(&served["properties"][top], top, &mut have);
            }
            want.sort();
            have.sort();
            assert!(want.len() > 1, "{kind} {version}: fields found in the CRD");
            assert_eq!(
                have, want,
                "{kind} {version}: the served schema is not the CRD's"
            );
            checked += 1;
        }
    }
    // Every CRD version this server serves.
    assert!(checked >= 7, "{checked} served CRD versions checked");
}
