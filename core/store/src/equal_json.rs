//! Whether a typed struct serialises to a given JSON value, decided without building that JSON.
//!
//! A patch of a stored VM or VMI changes a few of its fields; whether it changed anything at
//! all (no write then: no new resourceVersion, no watch event) is a comparison of each patched
//! field with the stored one. The stored object is its struct alone, so the comparison walks
//! the struct's serialisation and the patched value side by side: no copy of the field to
//! compare with, no allocation. A `true` means `serde_json::to_value(t) == *v` — serde_json's
//! equality, for which object keys may come in any order. Anything it cannot confirm (a map
//! key that is not a string, a duplicate key) counts as a difference, which only costs a write
//! that changes nothing.

use serde::ser::{self, Serialize};
use serde_json::{Map, Value};

/// Whether `serde_json::to_value(t)` equals `v` (object keys in any order).
pub(crate) fn serialises_equal<T: Serialize + ?Sized>(t: &T, v: &Value) -> bool {
    t.serialize(Matcher(v)).is_ok()
}

/// The serialisation differs from the value (no detail: the caller only falls back).
#[derive(Debug)]
pub(crate) struct Mismatch;

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("serialisation differs from the stored value")
    }
}

impl std::error::Error for Mismatch {}

impl ser::Error for Mismatch {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Mismatch
    }
}

fn check(ok: bool) -> Result<(), Mismatch> {
    if ok { Ok(()) } else { Err(Mismatch) }
}

/// Serialises into a comparison with one JSON value.
struct Matcher<'v>(&'v Value);

impl<'v> Matcher<'v> {
    /// The single `{variant: ...}` entry an enum variant with data serialises to.
    fn variant(&self, variant: &str) -> Result<&'v Value, Mismatch> {
        match self.0 {
            Value::Object(m) if m.len() == 1 => match m.iter().next() {
                Some((k, inner)) if k == variant => Ok(inner),
                _ => Err(Mismatch),
            },
            _ => Err(Mismatch),
        }
    }

    fn seq(v: &'v Value, len: Option<usize>) -> Result<Elements<'v>, Mismatch> {
        match v {
            Value::Array(items) if len.is_none_or(|n| n == items.len()) => Ok(Elements {
                items: items.iter(),
            }),
            _ => Err(Mismatch),
        }
    }

    fn object(v: &'v Value) -> Result<Entries<'v>, Mismatch> {
        match v {
            Value::Object(map) => Ok(Entries {
                map,
                matched: 0,
                value: None,
            }),
            _ => Err(Mismatch),
        }
    }
}

impl<'v> ser::Serializer for Matcher<'v> {
    type Ok = ();
    type Error = Mismatch;
    type SerializeSeq = Elements<'v>;
    type SerializeTuple = Elements<'v>;
    type SerializeTupleStruct = Elements<'v>;
    type SerializeTupleVariant = Elements<'v>;
    type SerializeMap = Entries<'v>;
    type SerializeStruct = Entries<'v>;
    type SerializeStructVariant = Entries<'v>;

    fn serialize_bool(self, b: bool) -> Result<(), Mismatch> {
        check(self.0.as_bool() == Some(b))
    }
    fn serialize_i8(self, n: i8) -> Result<(), Mismatch> {
        check(*self.0 == n)
    }
    fn serialize_i16(self, n: i16) -> Result<(), Mismatch> {
        check(*self.0 == n)
    }
    fn serialize_i32(self, n: i32) -> Result<(), Mismatch> {
        check(*self.0 == n)
    }
    fn serialize_i64(self, n: i64) -> Result<(), Mismatch> {
        check(*self.0 == n)
    }
    fn serialize_i128(self, n: i128) -> Result<(), Mismatch> {
        check(serde_json::to_value(n).is_ok_and(|x| x == *self.0))
    }
    fn serialize_u8(self, n: u8) -> Result<(), Mismatch> {
        check(*self.0 == n)
    }
    fn serialize_u16(self, n: u16) -> Result<(), Mismatch> {
        check(*self.0 == n)
    }
    fn serialize_u32(self, n: u32) -> Result<(), Mismatch> {
        check(*self.0 == n)
    }
    fn serialize_u64(self, n: u64) -> Result<(), Mismatch> {
        check(*self.0 == n)
    }
    fn serialize_u128(self, n: u128) -> Result<(), Mismatch> {
        check(serde_json::to_value(n).is_ok_and(|x| x == *self.0))
    }
    fn serialize_f32(self, n: f32) -> Result<(), Mismatch> {
        check(serde_json::to_value(n).is_ok_and(|x| x == *self.0))
    }
    fn serialize_f64(self, n: f64) -> Result<(), Mismatch> {
        check(serde_json::to_value(n).is_ok_and(|x| x == *self.0))
    }
    fn serialize_char(self, c: char) -> Result<(), Mismatch> {
        let mut buf = [0u8; 4];
        self.serialize_str(c.encode_utf8(&mut buf))
    }
    fn serialize_str(self, s: &str) -> Result<(), Mismatch> {
        check(self.0.as_str() == Some(s))
    }
    fn serialize_bytes(self, bytes: &[u8]) -> Result<(), Mismatch> {
        let Value::Array(items) = self.0 else {
            return Err(Mismatch);
        };
        check(items.len() == bytes.len() && items.iter().zip(bytes).all(|(v, b)| *v == *b))
    }
    fn serialize_none(self) -> Result<(), Mismatch> {
        check(self.0.is_null())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Mismatch> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Mismatch> {
        check(self.0.is_null())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Mismatch> {
        check(self.0.is_null())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Mismatch> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Mismatch> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Mismatch> {
        let inner = self.variant(variant)?;
        value.serialize(Matcher(inner))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Elements<'v>, Mismatch> {
        Self::seq(self.0, len)
    }
    fn serialize_tuple(self, len: usize) -> Result<Elements<'v>, Mismatch> {
        Self::seq(self.0, Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Elements<'v>, Mismatch> {
        Self::seq(self.0, Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Elements<'v>, Mismatch> {
        let inner = self.variant(variant)?;
        Self::seq(inner, Some(len))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Entries<'v>, Mismatch> {
        Self::object(self.0)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Entries<'v>, Mismatch> {
        Self::object(self.0)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Entries<'v>, Mismatch> {
        let inner = self.variant(variant)?;
        Self::object(inner)
    }
}

/// The elements of an array, matched in order.
pub(crate) struct Elements<'v> {
    items: std::slice::Iter<'v, Value>,
}

impl Elements<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Mismatch> {
        let item = self.items.next().ok_or(Mismatch)?;
        value.serialize(Matcher(item))
    }

    fn finish(mut self) -> Result<(), Mismatch> {
        check(self.items.next().is_none())
    }
}

/// The four array-shaped compounds differ only in their method's name.
macro_rules! elements_impl {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Elements<'_> {
            type Ok = ();
            type Error = Mismatch;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Mismatch> {
                self.element(value)
            }
            fn end(self) -> Result<(), Mismatch> {
                self.finish()
            }
        }
    )*};
}

elements_impl!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// The entries of an object, matched by key: every key the serialisation writes must be
/// there with an equal value, and no other key may be.
pub(crate) struct Entries<'v> {
    map: &'v Map<String, Value>,
    /// Keys written (and found) so far.
    matched: usize,
    /// The value of the entry whose key `serialize_key` just found.
    value: Option<&'v Value>,
}

impl Entries<'_> {
    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Mismatch> {
        let v = self.map.get(key).ok_or(Mismatch)?;
        self.matched += 1;
        value.serialize(Matcher(v))
    }

    fn finish(self) -> Result<(), Mismatch> {
        check(self.matched == self.map.len() && self.value.is_none())
    }
}

impl<'v> ser::SerializeMap for Entries<'v> {
    type Ok = ();
    type Error = Mismatch;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Mismatch> {
        let found: &'v Value = key.serialize(KeyLookup(self.map))?;
        self.matched += 1;
        self.value = Some(found);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Mismatch> {
        let v = self.value.take().ok_or(Mismatch)?;
        value.serialize(Matcher(v))
    }
    fn end(self) -> Result<(), Mismatch> {
        self.finish()
    }
}

/// A struct and a struct variant's fields match alike.
macro_rules! fields_impl {
    ($($trait:ident),*) => {$(
        impl ser::$trait for Entries<'_> {
            type Ok = ();
            type Error = Mismatch;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Mismatch> {
                self.field(key, value)
            }
            fn end(self) -> Result<(), Mismatch> {
                self.finish()
            }
        }
    )*};
}

fields_impl!(SerializeStruct, SerializeStructVariant);

/// A map key looked up in the stored object: its value. Only string keys are looked up;
/// anything else (which `to_value` would turn into a string, or refuse) is a mismatch.
struct KeyLookup<'v>(&'v Map<String, Value>);

impl<'v> ser::Serializer for KeyLookup<'v> {
    type Ok = &'v Value;
    type Error = Mismatch;
    type SerializeSeq = ser::Impossible<&'v Value, Mismatch>;
    type SerializeTuple = ser::Impossible<&'v Value, Mismatch>;
    type SerializeTupleStruct = ser::Impossible<&'v Value, Mismatch>;
    type SerializeTupleVariant = ser::Impossible<&'v Value, Mismatch>;
    type SerializeMap = ser::Impossible<&'v Value, Mismatch>;
    type SerializeStruct = ser::Impossible<&'v Value, Mismatch>;
    type SerializeStructVariant = ser::Impossible<&'v Value, Mismatch>;

    fn serialize_str(self, s: &str) -> Result<&'v Value, Mismatch> {
        self.0.get(s).ok_or(Mismatch)
    }
    fn serialize_char(self, c: char) -> Result<&'v Value, Mismatch> {
        let mut buf = [0u8; 4];
        self.serialize_str(c.encode_utf8(&mut buf))
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<&'v Value, Mismatch> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<&'v Value, Mismatch> {
        value.serialize(self)
    }
    fn serialize_bool(self, _: bool) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_i8(self, _: i8) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_i16(self, _: i16) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_i32(self, _: i32) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_i64(self, _: i64) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_u8(self, _: u8) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_u16(self, _: u16) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_u32(self, _: u32) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_u64(self, _: u64) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_f32(self, _: f32) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_f64(self, _: f64) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_none(self) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_unit(self) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<&'v Value, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, Mismatch> {
        Err(Mismatch)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Mismatch> {
        Err(Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::serialises_equal;
    use kvrs_api::VirtualMachineInstance;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn vmi() -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "a", "namespace": "default", "labels": {"x": "1", "kubevirt.io/vm": "a"},
                         "resourceVersion": "7", "generation": 2},
            "spec": {"domain": {"devices": {"disks": [{"name": "d", "disk": {"bus": "virtio"}}]},
                                "memory": {"guest": "128Mi"}, "resources": {"requests": {"memory": "1Gi"}}},
                     "terminationGracePeriodSeconds": 5},
            "status": {"phase": "Running", "activePods": {"u1": "node01"},
                       "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null}],
                       "simMarker": "kept"}
        }))
        .expect("a valid VMI")
    }

    #[test]
    fn the_json_of_a_vmi_is_equal_to_it() {
        let v = vmi();
        let json = serde_json::to_value(&v).expect("serialises");
        assert!(serialises_equal(&v, &json));
    }

    /// serde_json's map equality ignores key order; so does the comparison.
    #[test]
    fn object_keys_may_come_in_another_order() {
        let v = vmi();
        let mut reordered = serde_json::to_value(&v).expect("serialises");
        reordered["metadata"]["labels"] = json!({"x": "1", "kubevirt.io/vm": "a"});
        if let Some(Value::Object(c)) = reordered.pointer_mut("/status/conditions/0") {
            let entries: Vec<(String, Value)> = std::mem::take(c).into_iter().rev().collect();
            c.extend(entries);
        }
        assert_ne!(
            serde_json::to_string(&reordered).ok(),
            serde_json::to_string(&serde_json::to_value(&v).ok()).ok(),
            "the keys are in another order"
        );
        assert!(serialises_equal(&v, &reordered));
    }

    #[test]
    fn a_different_value_number_kind_missing_or_extra_key_differs() {
        let v = vmi();
        let json = serde_json::to_value(&v).expect("serialises");

        let mut other_value = json.clone();
        other_value["status"]["phase"] = json!("Failed");
        assert!(!serialises_equal(&v, &other_value));

        let mut float = json.clone();
        float["spec"]["terminationGracePeriodSeconds"] = json!(5.0);
        assert!(!serialises_equal(&v, &float));

        let mut extra = json.clone();
        extra["metadata"]["annotations"] = json!({"a": "b"});
        assert!(!serialises_equal(&v, &extra));

        let mut extra_in_map = json.clone();
        extra_in_map["status"]["activePods"]["u2"] = json!("node02");
        assert!(!serialises_equal(&v, &extra_in_map));

        let mut missing = json.clone();
        missing["metadata"]
            .as_object_mut()
            .map(|m| m.shift_remove("generation"));
        assert!(!serialises_equal(&v, &missing));

        let mut longer = json;
        if let Some(c) = longer["status"]["conditions"].as_array_mut() {
            c.push(json!({"type": "Paused", "status": "False"}));
        }
        assert!(!serialises_equal(&v, &longer));
    }

    proptest! {
        /// Whatever a patch leaves behind, the comparison says what comparing it with the
        /// struct's JSON would say.
        #[test]
        fn the_comparison_is_json_equality(
            phase in prop::option::of("[A-Za-z]{0,8}"),
            grace in prop::option::of(prop_oneof![
                any::<i64>().prop_map(Value::from),
                (0.0f64..1e6).prop_map(Value::from),
                "[0-9]{1,3}".prop_map(Value::from),
            ]),
            labels in prop::collection::vec(("[a-c]{1,2}", "[a-z]{0,3}"), 0..4),
            pods in prop::collection::vec(("[a-c]{1,2}", "[a-z]{0,3}"), 0..3),
            extra in prop::option::of("[a-z]{1,3}"),
            other_phase in prop::option::of("[A-Za-z]{0,8}"),
        ) {
            let mut raw = serde_json::to_value(vmi()).expect("serialises");
            match &phase {
                Some(p) => raw["status"]["phase"] = json!(p),
                None => { raw["status"].as_object_mut().map(|s| s.shift_remove("phase")); }
            }
            if let Some(g) = grace {
                raw["spec"]["terminationGracePeriodSeconds"] = g;
            }
            let mut l = serde_json::Map::new();
            for (k, v) in labels {
                l.insert(k, json!(v));
            }
            raw["metadata"]["labels"] = Value::Object(l);
            let mut p = serde_json::Map::new();
            for (k, v) in pods {
                p.insert(k, json!(v));
            }
            raw["status"]["activePods"] = Value::Object(p);
            if let Some(x) = extra {
                raw["status"][x.as_str()] = json!(1);
            }
            if let Ok(typed) = serde_json::from_value::<VirtualMachineInstance>(raw.clone()) {
                let json = serde_json::to_value(&typed).expect("serialises");
                let mut patched = raw.clone();
                if let Some(p) = other_phase {
                    patched["status"]["phase"] = json!(p);
                }
                prop_assert_eq!(serialises_equal(&typed, &patched), json == patched);
            }
        }
    }
}
