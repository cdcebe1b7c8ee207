//! Conflicts: the VM fields that an instancetype owns but the VM sets itself, named and worded
//! as KubeVirt v1.9.0 names them (`pkg/instancetype/conflict`).

use std::fmt;

/// One field in conflict: its path (`spec.template.spec.domain.cpu.sockets`), and the message
/// when KubeVirt words it specially (the spread check), else the standard one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The field path, as Kubernetes prints a `field.Path`.
    pub path: String,
    /// A message replacing the standard "VM field(s) ... conflicts with selected instance type".
    pub message: Option<String>,
}

impl Conflict {
    /// A conflict at `path` with the standard message.
    pub fn at(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: None,
        }
    }

    /// A conflict at `base` + `.` + the children (`base` may be empty).
    pub fn child(base: &str, children: &[&str]) -> Self {
        let mut path = base.to_string();
        for c in children {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(c);
        }
        Self::at(path)
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.message {
            Some(m) => f.write_str(m),
            None => write!(
                f,
                "VM field(s) {} conflicts with selected instance type",
                self.path
            ),
        }
    }
}

impl std::error::Error for Conflict {}

/// The conflicts of one application, in the order KubeVirt finds them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl Conflicts {
    /// The paths joined with `", "`, as KubeVirt's `Conflicts.String()`.
    pub fn paths(&self) -> String {
        self.0
            .iter()
            .map(|c| c.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether nothing conflicts.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Conflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "VM field(s) {} conflicts with selected instance type",
            self.paths()
        )
    }
}

impl std::error::Error for Conflicts {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_kubevirts() {
        let c = Conflicts(vec![
            Conflict::child("spec.template.spec", &["domain", "cpu", "sockets"]),
            Conflict::child("", &["annotations", "a/b"]),
        ]);
        assert_eq!(
            c.to_string(),
            "VM field(s) spec.template.spec.domain.cpu.sockets, annotations.a/b conflicts with \
             selected instance type"
        );
        assert_eq!(
            c.0[0].to_string(),
            "VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected instance type"
        );
    }
}
