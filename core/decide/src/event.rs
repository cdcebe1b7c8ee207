//! Kubernetes events a decision records about the objects it reconciles.

use serde_json::{Value, json};

/// The kind of an event, as Kubernetes spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

impl EventType {
    /// `Normal` or `Warning`.
    pub fn as_str(&self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// A Kubernetes event about an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The object the event is about.
    pub object: ObjectRef,
    /// Normal or Warning.
    pub kind: EventType,
    /// CamelCase reason, e.g. `SuccessfulCreate`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl Event {
    /// A `Normal` event.
    pub fn normal(object: ObjectRef, reason: &str, message: impl Into<String>) -> Self {
        Self {
            object,
            kind: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A `Warning` event.
    pub fn warning(object: ObjectRef, reason: &str, message: impl Into<String>) -> Self {
        Self {
            object,
            kind: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// `{object, type, reason, message}` as in the oracles.
    pub fn to_json(&self) -> Value {
        json!({
            "object": format!("{} {}/{}", self.object.kind, self.object.namespace, self.object.name),
            "type": self.kind.as_str(),
            "reason": self.reason,
            "message": self.message,
        })
    }
}

/// Names an object: kind, namespace, name (and UID when known).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRef {
    /// Kind, e.g. `VirtualMachine`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID, when known.
    pub uid: Option<String>,
}
