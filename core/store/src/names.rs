//! Object names and namespaces as kube-apiserver validates them (apimachinery's
//! `IsDNS1123Subdomain`, `IsDNS1123Label`, `IsDNS1035Label`, `IsValidLabelValue`), with its
//! messages, so a refusal reads as the real server's and nothing that becomes a path (`..`,
//! `a/b`, NUL, 1 000 characters) is ever stored.

use crate::resource::ResourceType;

/// One refused field: kube-apiserver's `field.Error` of type `FieldValueInvalid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldCause {
    /// The JSON path, `metadata.name`.
    pub field: String,
    /// The refused value.
    pub value: String,
    /// Why (apimachinery's message).
    pub message: String,
}

impl FieldCause {
    fn new(field: &str, value: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            value: value.into(),
            message: message.into(),
        }
    }

    /// `Invalid value: "x": message` (or `Required value`), the cause's text without its field.
    pub fn detail(&self) -> String {
        if self.message == REQUIRED {
            return REQUIRED.into();
        }
        format!("Invalid value: {}: {}", go_quote(&self.value), self.message)
    }

    /// kube-apiserver's `StatusCause.reason`.
    pub fn reason(&self) -> &'static str {
        if self.message == REQUIRED {
            "FieldValueRequired"
        } else {
            "FieldValueInvalid"
        }
    }
}

impl std::fmt::Display for FieldCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.detail())
    }
}

/// The message of a changed immutable field.
pub const IMMUTABLE: &str = "field is immutable";
const REQUIRED: &str = "Required value";

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn max_len(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-')
}

fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_label)
}

/// apimachinery's `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len(253));
    }
    if !is_subdomain(s) {
        errs.push(SUBDOMAIN_MSG.into());
    }
    errs
}

/// apimachinery's `IsDNS1123Label` (a valid subdomain with dots: "must not contain dots").
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len(63));
    }
    if !is_label(s) {
        if is_subdomain(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(LABEL_MSG.into());
        }
    }
    errs
}

/// apimachinery's `IsDNS1035Label` (Services).
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len(63));
    }
    if !(is_label(s) && s.as_bytes()[0].is_ascii_lowercase()) {
        errs.push(DNS1035_MSG.into());
    }
    errs
}

/// apimachinery's `IsValidLabelValue`.
pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len(63));
    }
    let b = s.as_bytes();
    let ok = b.is_empty()
        || (b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')));
    if !ok {
        errs.push(LABEL_VALUE_MSG.into());
    }
    errs
}

/// Whether `s` is a valid namespace name (what may become a directory of a pod's namespace).
pub fn is_valid_namespace(s: &str) -> bool {
    dns1123_label(s).is_empty()
}

/// Whether `s` is a valid name of an object of `rt`.
pub fn is_valid_name(rt: &ResourceType, s: &str) -> bool {
    name_rule(rt)(s).is_empty()
}

type Rule = fn(&str) -> Vec<String>;

/// The name rule kube-apiserver applies to `rt`: DNS-1123 labels for Namespaces, DNS-1035
/// labels for Services, DNS-1123 subdomains for everything else it or KubeVirt's CRDs serve.
fn name_rule(rt: &ResourceType) -> Rule {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") => dns1123_label,
        ("", "services") => dns1035_label,
        _ => dns1123_subdomain,
    }
}

/// The name rule in `generateName` form: a trailing `-` is allowed (apimachinery's
/// `maskTrailingDash`).
fn prefix_errors(rule: Rule, prefix: &str) -> Vec<String> {
    // Go's `name[:len(name)-2] + "a"`: the last two bytes become one `a`.
    let masked = if prefix.len() > 1 && prefix.ends_with('-') {
        let mut cut = prefix.len() - 2;
        while !prefix.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}a", &prefix[..cut])
    } else {
        prefix.to_string()
    };
    rule(&masked)
}

/// The causes kube-apiserver's `ValidateObjectMeta` gives for the identity of a new object:
/// `metadata.name` (and `generateName`) by the resource's rule, `metadata.namespace` as a
/// DNS-1123 label for namespaced resources, and for a Namespace its
/// `kubernetes.io/metadata.name` label value.
pub fn validate_identity(
    rt: &ResourceType,
    name: &str,
    generate_name: Option<&str>,
    namespace: Option<&str>,
) -> Vec<FieldCause> {
    let rule = name_rule(rt);
    let mut causes = Vec::new();
    if let Some(prefix) = generate_name.filter(|p| !p.is_empty()) {
        for m in prefix_errors(rule, prefix) {
            causes.push(FieldCause::new("metadata.generateName", prefix, m));
        }
    }
    for m in rule(name) {
        causes.push(FieldCause::new("metadata.name", name, m));
    }
    if rt.namespaced {
        match namespace {
            None | Some("") => causes.push(FieldCause::new("metadata.namespace", "", REQUIRED)),
            Some(ns) => {
                for m in dns1123_label(ns) {
                    causes.push(FieldCause::new("metadata.namespace", ns, m));
                }
            }
        }
    }
    if rt.group.is_empty() && rt.plural == "namespaces" {
        for m in label_value(name) {
            causes.push(FieldCause::new("metadata.labels", name, m));
        }
    }
    causes
}

/// A cause for a changed immutable field.
pub fn immutable(field: &str, value: &str) -> FieldCause {
    FieldCause::new(field, value, IMMUTABLE)
}

/// Go's `%q` of a string: what kube-apiserver's messages quote names with.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::lookup;

    #[test]
    fn path_like_names_are_refused() {
        let pods = lookup("", "pods").unwrap();
        for bad in [
            "..",
            ".",
            "../x",
            "a/b",
            "a\0b",
            "a b",
            "Abc",
            "",
            "-a",
            "a-",
            "a..b",
            &"a".repeat(254),
        ] {
            assert!(!is_valid_name(&pods, bad), "{bad:?}");
            assert!(!is_valid_namespace(bad), "{bad:?}");
        }
        for good in ["a", "a-b", "a.b", "0", &"a".repeat(253)] {
            assert!(is_valid_name(&pods, good), "{good:?}");
        }
        assert!(!is_valid_namespace("a.b"));
        assert!(!is_valid_namespace(&"a".repeat(64)));
        assert!(is_valid_namespace(&"a".repeat(63)));
    }

    #[test]
    fn messages_are_apimachinerys() {
        let ns = lookup("", "namespaces").unwrap();
        let c = validate_identity(&ns, "a.b", None, None);
        assert_eq!(c.len(), 1);
        assert_eq!(
            c[0].to_string(),
            "metadata.name: Invalid value: \"a.b\": must not contain dots"
        );
        let c = validate_identity(&ns, "..", None, None);
        assert_eq!(
            c.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            ["metadata.name", "metadata.labels"]
        );
        assert_eq!(go_quote("a\0b"), "\"a\\x00b\"");
        let pods = lookup("", "pods").unwrap();
        let c = validate_identity(&pods, "ok", Some("gen-"), Some("../x"));
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].field, "metadata.namespace");
    }
}
