//! JSON pointer look-ups (RFC 6901) without an allocation per step.
//!
//! `serde_json::Value::pointer` unescapes every reference token into a new `String` (two
//! `str::replace` calls each), which made plain look-ups such as `/metadata/deletionTimestamp`
//! one of the larger costs of the simulator's writes and decisions. These look-ups borrow each
//! token and unescape only tokens that hold a `~`; what they find is exactly what
//! `Value::pointer` finds (a property test in this module pins that).

use std::borrow::Cow;

use serde_json::Value;

/// `Value::pointer` and `Value::pointer_mut` under other names, borrowing the pointer's tokens.
pub trait JsonPointer {
    /// The value `pointer` refers to, as [`Value::pointer`] finds it.
    fn at(&self, pointer: &str) -> Option<&Value>;
    /// The value `pointer` refers to, mutably, as [`Value::pointer_mut`] finds it.
    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value>;
}

/// A reference token, unescaped as `Value::pointer` does (`~1` first, then `~0`); borrowed
/// unless it holds a `~`.
pub fn token(raw: &str) -> Cow<'_, str> {
    if raw.contains('~') {
        Cow::Owned(raw.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(raw)
    }
}

/// An array index as RFC 6901 spells it: no sign, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// The tokens of `pointer`, or `None` when it is neither empty nor starts with `/`.
fn tokens(pointer: &str) -> Option<impl Iterator<Item = Cow<'_, str>>> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return None;
    }
    Some(pointer.split('/').skip(1).map(token))
}

impl JsonPointer for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        tokens(pointer)?.try_fold(self, |target, t| match target {
            Value::Object(map) => map.get(t.as_ref()),
            Value::Array(list) => index(&t).and_then(|i| list.get(i)),
            _ => None,
        })
    }

    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value> {
        tokens(pointer)?.try_fold(self, |target, t| match target {
            Value::Object(map) => map.get_mut(t.as_ref()),
            Value::Array(list) => index(&t).and_then(move |i| list.get_mut(i)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "metadata": {"labels": {"vm.kubevirt.io/name": "a", "x~y": "t", "~1": "lit"},
                         "finalizers": ["f0", "f1"]},
            "list": [{"a": 1}, {"b": [true, null]}],
            "": {"": "empty keys"},
            "0": "zero",
            "01": "leading zero key",
        })
    }

    #[test]
    fn finds_what_value_pointer_finds_on_the_usual_paths() {
        let d = doc();
        for p in [
            "",
            "/",
            "//",
            "/metadata/labels/vm.kubevirt.io~1name",
            "/metadata/labels/x~0y",
            "/metadata/labels/~01",
            "/metadata/finalizers/1",
            "/metadata/finalizers/01",
            "/metadata/finalizers/+1",
            "/metadata/finalizers/2",
            "/list/1/b/0",
            "/0",
            "/01",
            "metadata",
            "/missing/x",
        ] {
            assert_eq!(d.at(p), d.pointer(p), "{p:?}");
            let (mut a, mut b) = (d.clone(), d.clone());
            assert_eq!(
                a.at_mut(p).cloned(),
                b.pointer_mut(p).cloned(),
                "{p:?} (mut)"
            );
        }
    }

    proptest! {
        /// Any pointer built from these pieces finds the same value both ways.
        #[test]
        fn agrees_with_value_pointer(parts in proptest::collection::vec(
            prop_oneof![
                Just("metadata"), Just("labels"), Just("finalizers"), Just("list"), Just("b"),
                Just("0"), Just("1"), Just("01"), Just("+1"), Just(""), Just("~0"), Just("~1"),
                Just("~01"), Just("x~0y"), Just("vm.kubevirt.io~1name"), Just("~"), Just("~2"),
            ],
            0..5,
        ), slash in any::<bool>()) {
            let d = doc();
            let p = format!("{}{}", if slash { "/" } else { "" }, parts.join("/"));
            prop_assert_eq!(d.at(&p), d.pointer(&p));
        }
    }
}
