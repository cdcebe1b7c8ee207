//! Serde helpers shared by the generated API types.

use serde::{Deserialize, Deserializer};

/// Deserializes a field that KubeVirt writes as an explicit `null` (for example a condition's
/// `lastProbeTime`) so that the `null` survives a round trip: a present `null` becomes
/// `Some(Value::Null)`, an absent field stays `None` through `#[serde(default)]`.
pub(crate) fn keep_null<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(deserializer).map(Some)
}

/// True when a value equals its type's default; used to leave an empty `metadata` out.
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
