//! Checking what a hook returned before the launcher uses it (pure).
//!
//! KubeVirt parses `OnDefineDomain`'s answer into its domain type and defines the answer as it
//! came; kvrs does the same, and checks each hook's answer as it arrives rather than only the
//! last one, so the error names the hook that broke the XML. It also refuses a renamed domain:
//! the launcher finds its domain by name, and a renamed one would be defined and then lost.

use kvrs_converter::Domain;

use super::error::{HookError, HookName};

/// The domain XML a hook returned, checked: UTF-8, one `<domain>` root that parses as a
/// domain, and the launcher's domain name. Returns the text to define and its parsed form.
pub fn domain_xml(
    hook: &HookName,
    expected_name: &str,
    answer: Vec<u8>,
) -> Result<(String, Domain), HookError> {
    let malformed = |reason: String| HookError::MalformedDomain {
        hook: hook.clone(),
        reason,
    };
    let xml = String::from_utf8(answer).map_err(|e| malformed(format!("not UTF-8: {e}")))?;
    match root_element(&xml) {
        Some("domain") => {}
        Some(other) => {
            return Err(malformed(format!(
                "root element is <{other}>, not <domain>"
            )));
        }
        None => return Err(malformed("no root element (empty answer?)".into())),
    }
    let domain = Domain::from_xml(&xml).map_err(|e| malformed(e.to_string()))?;
    if domain.name != expected_name {
        return Err(HookError::RenamedDomain {
            hook: hook.clone(),
            from: expected_name.to_string(),
            to: domain.name,
        });
    }
    Ok((xml, domain))
}

/// The name of the document's first element, after any XML declaration, processing
/// instructions, comments and doctype.
fn root_element(xml: &str) -> Option<&str> {
    let mut rest = xml.trim_start_matches('\u{feff}').trim_start();
    loop {
        if let Some(r) = rest.strip_prefix("<?") {
            rest = r.split_once("?>")?.1.trim_start();
        } else if let Some(r) = rest.strip_prefix("<!--") {
            rest = r.split_once("-->")?.1.trim_start();
        } else if let Some(r) = rest.strip_prefix("<!") {
            rest = r.split_once('>')?.1.trim_start();
        } else {
            break;
        }
    }
    let tag = rest.strip_prefix('<')?;
    let end = tag
        .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
        .unwrap_or(tag.len());
    Some(&tag[..end]).filter(|t| !t.is_empty())
}

/// KubeVirt's `CloudInitData` fields a hook may change, as its JSON names them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub struct CloudInitAnswer {
    /// `noCloud` or `configDrive` (the launcher keeps its own when the hook answered the legacy
    /// shape).
    #[serde(rename = "DataSource", default)]
    pub data_source: String,
    /// The user data to write.
    #[serde(rename = "UserData", default)]
    pub user_data: String,
    /// The network data to write (empty: none).
    #[serde(rename = "NetworkData", default)]
    pub network_data: String,
    /// Present in valid `CloudInitData` (either metadata).
    #[serde(rename = "NoCloudMetaData", default)]
    no_cloud_meta_data: Option<serde_json::Value>,
    #[serde(rename = "ConfigDriveMetaData", default)]
    config_drive_meta_data: Option<serde_json::Value>,
}

impl CloudInitAnswer {
    /// The metadata the hook returned for the launcher's data source, if any.
    pub fn meta_data(&self, no_cloud: bool) -> Option<&serde_json::Value> {
        if no_cloud {
            self.no_cloud_meta_data.as_ref()
        } else {
            self.config_drive_meta_data.as_ref()
        }
        .filter(|m| !m.is_null())
    }
}

/// The legacy `CloudInitNoCloudSource` answer (`userData`, `networkData`).
#[derive(Debug, Default, serde::Deserialize)]
struct NoCloudAnswer {
    #[serde(rename = "userData", default)]
    user_data: String,
    #[serde(rename = "networkData", default)]
    network_data: String,
}

/// What `PreCloudInitIso` answered, read as KubeVirt reads it: the `CloudInitData` when it is
/// valid (user data and some metadata), else the legacy `CloudInitNoCloudSource` with the
/// launcher's data source kept.
pub fn cloud_init_answer(
    hook: &HookName,
    data_source: &str,
    cloud_init_data: &[u8],
    no_cloud_source: &[u8],
) -> Result<CloudInitAnswer, HookError> {
    let malformed = |what: &str, e: serde_json::Error| HookError::MalformedCloudInit {
        hook: hook.clone(),
        reason: format!("{what}: {e}"),
    };
    // Go unmarshals `null` (and so an empty-but-present JSON) into a nil pointer: not valid.
    let data: Option<CloudInitAnswer> =
        serde_json::from_slice(cloud_init_data).map_err(|e| malformed("cloudInitData", e))?;
    if let Some(d) = data.filter(|d| {
        !d.user_data.is_empty()
            && (d.no_cloud_meta_data.as_ref().is_some_and(|m| !m.is_null())
                || d.config_drive_meta_data
                    .as_ref()
                    .is_some_and(|m| !m.is_null()))
    }) {
        return Ok(d);
    }
    let legacy: Option<NoCloudAnswer> = serde_json::from_slice(no_cloud_source)
        .map_err(|e| malformed("cloudInitNoCloudSource", e))?;
    let legacy = legacy.unwrap_or_default();
    Ok(CloudInitAnswer {
        data_source: data_source.to_string(),
        user_data: legacy.user_data,
        network_data: legacy.network_data,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook() -> HookName {
        HookName {
            socket: "hook-sidecar-0/shim-ab12.sock".into(),
            name: "shim".into(),
        }
    }

    fn domain(name: &str) -> String {
        let d = Domain {
            kind: "qemu".into(),
            name: name.into(),
            ..Default::default()
        };
        d.to_xml().unwrap()
    }

    #[test]
    fn a_domain_with_the_launchers_name_is_defined_as_returned() {
        let xml = format!(
            "<?xml version=\"1.0\"?>\n<!-- by a hook -->\n{}\n",
            domain("ns_vm")
        );
        let (text, parsed) = domain_xml(&hook(), "ns_vm", xml.clone().into_bytes()).unwrap();
        assert_eq!(text, xml);
        assert_eq!(parsed.name, "ns_vm");
    }

    #[test]
    fn malformed_answers_name_the_hook_and_the_reason() {
        let cases: [(&[u8], &str); 5] = [
            (b"", "no root element"),
            (
                b"<domain type='qemu'><name>ns_vm</name>",
                "malformed domain XML",
            ),
            (
                b"<network><name>ns_vm</name></network>",
                "root element is <network>",
            ),
            (b"\xff\xfe<domain/>", "not UTF-8"),
            (b"not xml at all", "no root element"),
        ];
        for (answer, reason) in cases {
            let err = domain_xml(&hook(), "ns_vm", answer.to_vec()).unwrap_err();
            assert_eq!(err.label(), "malformed_domain", "{answer:?}");
            let text = err.to_string();
            assert!(
                text.contains("hook-sidecar-0/shim-ab12.sock (\"shim\")") && text.contains(reason),
                "{answer:?}: {text}"
            );
        }
    }

    #[test]
    fn a_renamed_domain_is_refused() {
        let err = domain_xml(&hook(), "ns_vm", domain("ns_other").into_bytes()).unwrap_err();
        assert_eq!(err.label(), "renamed_domain");
        assert!(
            err.to_string().contains("from \"ns_vm\" to \"ns_other\""),
            "{err}"
        );
    }

    #[test]
    fn root_element_skips_prolog() {
        assert_eq!(
            root_element("<?xml version='1.0'?><!DOCTYPE x><!-- c --><domain type='kvm'>"),
            Some("domain")
        );
        assert_eq!(root_element("  <domain>"), Some("domain"));
        assert_eq!(root_element("<domain/>"), Some("domain"));
        assert_eq!(root_element("<!-- unterminated"), None);
        assert_eq!(root_element("< domain>"), None);
    }

    #[test]
    fn cloud_init_answers_are_read_as_kubevirt_reads_them() {
        // Valid CloudInitData wins.
        let data = br##"{"DataSource":"noCloud","NoCloudMetaData":{"instance-id":"vm.ns"},"UserData":"#cloud-config\nnew","NetworkData":""}"##;
        let a = cloud_init_answer(&hook(), "noCloud", data, b"").unwrap();
        assert_eq!(a.user_data, "#cloud-config\nnew");
        // Without metadata it is not valid: the legacy answer is read, with the launcher's source.
        let data = br#"{"UserData":"ignored"}"#;
        let legacy = br#"{"userData":"legacy","networkData":"net"}"#;
        let a = cloud_init_answer(&hook(), "configDrive", data, legacy).unwrap();
        assert_eq!(
            (
                a.data_source.as_str(),
                a.user_data.as_str(),
                a.network_data.as_str()
            ),
            ("configDrive", "legacy", "net")
        );
        // Not JSON at all: refused, naming the hook.
        let err = cloud_init_answer(&hook(), "noCloud", b"{", b"").unwrap_err();
        assert_eq!(err.label(), "malformed_cloud_init");
        assert!(err.to_string().contains("shim"), "{err}");
    }
}
