//! Object metadata as the kube-apiserver validates it (name, generateName, namespace), a UID
//! that can be a path component, labels reserved for KubeVirt itself and the memory a VMI must
//! ask for.
//!
//! kvrs runs without an API server too (the CLI, library users, `kvrs run`), and the name,
//! namespace and UID become host paths (sockets, the cloud-init ISO, NVRAM): what the API server
//! would refuse is refused here, so `../` never reaches a path (issue 17).

use super::causes::Causes;
use crate::api::VirtualMachineInstance;

/// Labels only KubeVirt's own components may set on a VMI (on create, and change on update).
pub const RESERVED_LABELS: &[&str] = &[
    "kubevirt.io/created-by",
    "kubevirt.io/migrationJobUID",
    "kubevirt.io/nodeName",
    "kubevirt.io/migrationTargetNodeName",
    "kubevirt.io/schedulable",
    "kubevirt.io/install-strategy",
];

/// The apiserver's message for a name that is not a DNS-1123 subdomain.
const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
    alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
    (e.g. 'example.com', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Kubernetes' DNS-1123 subdomain (the rule the apiserver applies to a custom resource's name):
/// the complaint, if any.
pub(super) fn dns1123_subdomain_error(s: &str) -> Option<String> {
    if s.len() > 253 {
        return Some("must be no more than 253 characters".to_string());
    }
    let label_ok = |l: &str| {
        let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        l.chars().next().is_some_and(alnum)
            && l.chars().last().is_some_and(alnum)
            && l.chars().all(|c| alnum(c) || c == '-')
    };
    if s.split('.').all(label_ok) {
        None
    } else {
        Some(SUBDOMAIN_MESSAGE.to_string())
    }
}

/// Name, generateName, namespace and UID: plain names only.
fn check_object_meta(vmi: &VirtualMachineInstance, causes: &mut Causes) {
    let meta = &vmi.metadata;
    let quoted = |s: &str, why: String| format!("Invalid value: {s:?}: {why}");
    if let Some(name) = meta.name.as_deref().filter(|n| !n.is_empty())
        && let Some(why) = dns1123_subdomain_error(name)
    {
        causes.invalid("metadata.name", quoted(name, why));
    }
    if let Some(prefix) = meta.generate_name.as_deref().filter(|n| !n.is_empty()) {
        // As the apiserver: a generateName may end in '-' (a suffix follows).
        let masked = prefix
            .strip_suffix('-')
            .map_or(prefix.to_string(), |p| format!("{p}a"));
        if let Some(why) = dns1123_subdomain_error(&masked) {
            causes.invalid("metadata.generateName", quoted(prefix, why));
        }
    }
    if let Some(ns) = meta.namespace.as_deref().filter(|n| !n.is_empty())
        && let Some(why) = super::devices::dns1123_label_error(ns)
    {
        causes.invalid("metadata.namespace", quoted(ns, why));
    }
    // The API server assigns UIDs; a given one must still be usable as one path component.
    if let Some(uid) = meta.uid.as_deref()
        && (uid.contains('/') || uid.contains("..") || uid.chars().any(char::is_control))
    {
        causes.invalid(
            "metadata.uid",
            quoted(
                uid,
                "must not contain '/', '..' or control characters".to_string(),
            ),
        );
    }
    // A virtiofs filesystem's name is its socket's and mount's directory name (kvrs-only check:
    // KubeVirt leaves it to the volume it names).
    let filesystems = vmi.spec.domain.devices.filesystems.iter().flatten();
    for (i, fs) in filesystems.enumerate() {
        let n = fs.name.as_str();
        if n.is_empty()
            || n == "."
            || n == ".."
            || n.contains('/')
            || n.chars().any(char::is_control)
        {
            causes.invalid(
                format!("spec.domain.devices.filesystems[{i}].name"),
                quoted(
                    n,
                    "must be a plain name: not empty, '.' or '..', no '/' or control characters"
                        .to_string(),
                ),
            );
        }
    }
}

pub(super) fn check(vmi: &VirtualMachineInstance, causes: &mut Causes) {
    check_object_meta(vmi, causes);
    let reserved = vmi
        .metadata
        .labels
        .iter()
        .flatten()
        .any(|(k, _)| RESERVED_LABELS.contains(&k.as_str()));
    if reserved {
        causes.push(
            super::CauseKind::NotSupported,
            "metadata.labels",
            "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
        );
    }
    if vmi.metadata.name.as_deref().unwrap_or("").is_empty()
        && vmi
            .metadata
            .generate_name
            .as_deref()
            .unwrap_or("")
            .is_empty()
    {
        causes.required("metadata.name", "name or generateName is required");
    }
    let spec = &vmi.spec;
    let requested = spec
        .domain
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("memory"))
        .and_then(|q| q.value().ok())
        .unwrap_or(0);
    if requested != 0 {
        return;
    }
    let memory = spec.domain.memory.as_ref();
    if memory.is_none_or(|m| m.guest.is_none() && m.hugepages.is_none()) {
        causes.required(
            "spec.domain.memory.guest",
            "no memory requested, at least one of 'spec.domain.memory.guest', \
             'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' \
             must be set",
        );
    }
}
