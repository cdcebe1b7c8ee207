//! KubeVirt v1.9.0's `setDefaultArchitectureFromDataSource` (the VM mutator's defaults): a VM
//! whose template names no architecture takes the `template.kubevirt.io/architecture` label
//! of the first DataSource its DataVolume templates import from (following a DataSource that
//! points at another), when the label names an architecture KubeVirt knows. A DataSource that
//! cannot be read, has no label or names another architecture is skipped, as KubeVirt skips it.

use serde_json::Value;

use super::vm_infer::{DATA_SOURCE, Objects, Step};

const ARCHITECTURE_LABEL: &str = "template.kubevirt.io/architecture";

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The architecture `vm`'s DataSources give, if any; [`Step::Read`] while a DataSource on the
/// way has not been read yet. `vm` is the VM as JSON, in its namespace.
pub(super) fn from_data_sources(vm: &Value, objects: &Objects<'_>) -> Result<Option<String>, Step> {
    if !text(&vm["spec"]["template"]["spec"]["architecture"]).is_empty() {
        return Ok(None);
    }
    let templates = vm["spec"]["dataVolumeTemplates"].as_array();
    for template in templates.into_iter().flatten() {
        let source = &template["spec"]["sourceRef"];
        if !source.is_object() || !text(&source["kind"]).eq_ignore_ascii_case("datasource") {
            continue;
        }
        let namespace = Some(text(&source["namespace"]))
            .filter(|n| !n.is_empty())
            .unwrap_or(text(&vm["metadata"]["namespace"]));
        let Some(mut ds) = objects.get(DATA_SOURCE, namespace, text(&source["name"]))? else {
            continue;
        };
        let next = &ds["spec"]["source"]["dataSource"];
        if next.is_object() {
            match objects.get(DATA_SOURCE, text(&next["namespace"]), text(&next["name"]))? {
                Some(found) => ds = found,
                None => continue,
            }
        }
        match text(&ds["metadata"]["labels"][ARCHITECTURE_LABEL]) {
            arch @ ("amd64" | "arm64" | "s390x") => return Ok(Some(arch.to_string())),
            _ => continue,
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vm(source_ref: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {
            "dataVolumeTemplates": [{"metadata": {"name": "dv"}, "spec": {"sourceRef": source_ref}}],
            "template": {"spec": {"domain": {"devices": {}}}}}})
    }

    fn data_source(name: &str, labels: Value, source: Value) -> Value {
        json!({"kind": "DataSource", "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"source": source}})
    }

    #[test]
    fn the_data_sources_label_gives_the_architecture() {
        let v = vm(json!({"kind": "DataSource", "name": "fedora"}));
        let ds = data_source(
            "fedora",
            json!({"template.kubevirt.io/architecture": "arm64"}),
            json!({}),
        );
        let found = [ds];
        assert_eq!(
            from_data_sources(&v, &Objects::all(&found)).unwrap(),
            Some("arm64".to_string())
        );
        // Not read yet: asked for.
        let Err(Step::Read(r)) = from_data_sources(&v, &Objects::so_far(&[], &[])) else {
            panic!("the DataSource is to be read");
        };
        assert_eq!((r.kind, r.name.as_str()), ("DataSource", "fedora"));
        // Missing, unknown architecture, or an architecture already set: nothing.
        assert_eq!(from_data_sources(&v, &Objects::all(&[])).unwrap(), None);
        let odd = [data_source(
            "fedora",
            json!({"template.kubevirt.io/architecture": "riscv64"}),
            json!({}),
        )];
        assert_eq!(from_data_sources(&v, &Objects::all(&odd)).unwrap(), None);
        let mut set = v.clone();
        set["spec"]["template"]["spec"]["architecture"] = json!("amd64");
        assert_eq!(
            from_data_sources(&set, &Objects::all(&found)).unwrap(),
            None
        );
    }

    #[test]
    fn a_data_source_pointing_at_another_gives_the_others_label() {
        let v = vm(json!({"kind": "datasource", "name": "alias"}));
        let found = [
            data_source(
                "alias",
                json!({"template.kubevirt.io/architecture": "amd64"}),
                json!({"dataSource": {"name": "real", "namespace": "ns"}}),
            ),
            data_source(
                "real",
                json!({"template.kubevirt.io/architecture": "s390x"}),
                json!({}),
            ),
        ];
        assert_eq!(
            from_data_sources(&v, &Objects::all(&found)).unwrap(),
            Some("s390x".to_string())
        );
    }
}
