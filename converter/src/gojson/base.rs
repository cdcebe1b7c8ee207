//! The [`GoJson`] trait, the field-path error type, the lazily rendered [`Path`], the
//! [`go_struct!`] macro and the impls for primitives and containers.
//!
//! Go's `encoding/json` rules that shape everything here:
//! - every exported struct field is written under its Go name, in declaration order, unless tagged;
//!   KubeVirt's `api` package tags none of its domain fields for JSON, so nothing is omitted;
//! - a nil pointer or nil slice is `null`, an empty string is `""`, a zero number is `0`;
//! - on input, `null` for a non-pointer field leaves the zero value and unknown keys are ignored.

use serde_json::{Map, Value};

/// Conversion between a model type and the JSON Go's `encoding/json` produces for the matching
/// KubeVirt `api` type.
pub trait GoJson: Sized {
    /// The Go JSON value.
    fn to_go(&self) -> Value;
    /// Reads a Go JSON value; `at` names the place in the document for error messages.
    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError>;
}

/// A Go JSON value that does not fit the model, with the field path where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoJsonError {
    /// The JSON value has the wrong type (e.g. a string where Go has a number).
    #[error("{path}: expected {expected}, found {found}")]
    Type {
        /// Field path, e.g. `Spec.Devices.Disks[0].Driver.Queues`.
        path: String,
        /// What Go's type requires.
        expected: &'static str,
        /// The JSON found, shortened.
        found: String,
    },
    /// The value has the right type but is not allowed there.
    #[error("{path}: {reason}")]
    Invalid {
        /// Field path.
        path: String,
        /// Why it was refused.
        reason: String,
    },
}

impl GoJsonError {
    /// The field path the error points at.
    pub fn path(&self) -> &str {
        match self {
            GoJsonError::Type { path, .. } | GoJsonError::Invalid { path, .. } => path,
        }
    }
}

/// A position in a JSON document, kept as a chain of borrowed segments so the path string is only
/// built when an error is reported (parsing a domain visits a few thousand fields).
#[derive(Debug, Clone, Copy)]
pub struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Seg<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

impl<'a> Path<'a> {
    /// The document root.
    pub const ROOT: Path<'static> = Path {
        parent: None,
        seg: Seg::Root,
    };

    /// The object member `key` below this position.
    pub fn key(&'a self, key: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Key(key),
        }
    }

    /// The array element `index` below this position.
    pub fn index(&'a self, index: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Index(index),
        }
    }

    /// `Spec.Devices.Disks[0].Driver`, or `(root)` for the document itself.
    pub fn render(&self) -> String {
        let mut segs = Vec::new();
        let mut cur = Some(self);
        while let Some(p) = cur {
            segs.push(p.seg);
            cur = p.parent;
        }
        let mut out = String::new();
        for seg in segs.iter().rev() {
            match seg {
                Seg::Root => {}
                Seg::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        if out.is_empty() {
            "(root)".to_string()
        } else {
            out
        }
    }

    /// A type error at this position.
    pub fn type_error(&self, expected: &'static str, found: &Value) -> GoJsonError {
        let mut found = found.to_string();
        if found.len() > 60 {
            let mut cut = 57;
            while !found.is_char_boundary(cut) {
                cut -= 1;
            }
            found.truncate(cut);
            found.push_str("...");
        }
        GoJsonError::Type {
            path: self.render(),
            expected,
            found,
        }
    }

    /// A refused value at this position.
    pub fn invalid(&self, reason: impl Into<String>) -> GoJsonError {
        GoJsonError::Invalid {
            path: self.render(),
            reason: reason.into(),
        }
    }
}

/// The members of a JSON object, or `None` for `null` (Go leaves a struct at its zero value then).
pub(crate) fn object<'v>(
    v: &'v Value,
    at: &Path<'_>,
) -> Result<Option<&'v Map<String, Value>>, GoJsonError> {
    match v {
        Value::Object(m) => Ok(Some(m)),
        Value::Null => Ok(None),
        other => Err(at.type_error("an object", other)),
    }
}

/// Go's `xml.Name{}` as JSON: KubeVirt never fills `XMLName` when it builds a domain.
pub(crate) fn xml_name() -> Value {
    let mut m = Map::with_capacity(2);
    m.insert("Space".into(), Value::String(String::new()));
    m.insert("Local".into(), Value::String(String::new()));
    Value::Object(m)
}

impl GoJson for String {
    fn to_go(&self) -> Value {
        Value::String(self.clone())
    }
    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Null => Ok(String::new()),
            other => Err(at.type_error("a string", other)),
        }
    }
}

/// The model's text fields ([`crate::domain::Str`]): the same JSON as `String`.
impl GoJson for std::borrow::Cow<'static, str> {
    fn to_go(&self) -> Value {
        Value::String(self.to_string())
    }
    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        String::from_go(v, at).map(Into::into)
    }
}

impl GoJson for bool {
    fn to_go(&self) -> Value {
        Value::Bool(*self)
    }
    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        match v {
            Value::Bool(b) => Ok(*b),
            Value::Null => Ok(false),
            other => Err(at.type_error("a boolean", other)),
        }
    }
}

macro_rules! go_unsigned {
    ($($t:ty),*) => {$(
        impl GoJson for $t {
            fn to_go(&self) -> Value {
                Value::from(*self)
            }
            fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
                match v {
                    Value::Null => Ok(0),
                    Value::Number(n) => n
                        .as_u64()
                        .and_then(|n| <$t>::try_from(n).ok())
                        .ok_or_else(|| at.type_error(concat!("an integer that fits ", stringify!($t)), v)),
                    other => Err(at.type_error("a number", other)),
                }
            }
        }
    )*};
}

macro_rules! go_signed {
    ($($t:ty),*) => {$(
        impl GoJson for $t {
            fn to_go(&self) -> Value {
                Value::from(*self)
            }
            fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
                match v {
                    Value::Null => Ok(0),
                    Value::Number(n) => n
                        .as_i64()
                        .and_then(|n| <$t>::try_from(n).ok())
                        .ok_or_else(|| at.type_error(concat!("an integer that fits ", stringify!($t)), v)),
                    other => Err(at.type_error("a number", other)),
                }
            }
        }
    )*};
}

go_unsigned!(u32, u64);
go_signed!(i32, i64);

/// A Go pointer: `nil` is `null`.
impl<T: GoJson> GoJson for Option<T> {
    fn to_go(&self) -> Value {
        match self {
            Some(x) => x.to_go(),
            None => Value::Null,
        }
    }
    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        match v {
            Value::Null => Ok(None),
            v => T::from_go(v, at).map(Some),
        }
    }
}

/// A Go slice: the model never distinguishes nil from empty, and KubeVirt's converter leaves
/// unused slices nil, so an empty list is written as `null`.
impl<T: GoJson> GoJson for Vec<T> {
    fn to_go(&self) -> Value {
        slice_to_go(self)
    }
    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        slice_from_go(v, at)
    }
}

/// A Go slice kept inline while it holds one item ([`crate::domain::Few`]): the same JSON.
impl<T: GoJson> GoJson for crate::domain::Few<T> {
    fn to_go(&self) -> Value {
        slice_to_go(self)
    }
    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        slice_from_go(v, at)
    }
}

/// A Go slice's JSON: `null` when empty, an array otherwise.
fn slice_to_go<T: GoJson>(items: &[T]) -> Value {
    if items.is_empty() {
        Value::Null
    } else {
        Value::Array(items.iter().map(GoJson::to_go).collect())
    }
}

/// A Go slice read into any list type: `null` is empty, each item is read at its index.
fn slice_from_go<T: GoJson, L: Default + FromIterator<T>>(
    v: &Value,
    at: &Path<'_>,
) -> Result<L, GoJsonError> {
    match v {
        Value::Null => Ok(L::default()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, x)| T::from_go(x, &at.index(i)))
            .collect(),
        other => Err(at.type_error("an array", other)),
    }
}

impl<T: GoJson> GoJson for Box<T> {
    fn to_go(&self) -> Value {
        (**self).to_go()
    }
    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        T::from_go(v, at).map(Box::new)
    }
}

/// Field encodings other than the type's own, named in [`go_struct!`] with `as`.
pub(crate) mod modes {
    use super::{GoJson, GoJsonError, Path};
    use serde_json::Value;

    /// A Go non-pointer field (`string`, `uint`, ...) with `omitempty` in its XML tag, which the
    /// model keeps as an `Option`: `None` is Go's zero value (`""`, `0`), and the zero value reads
    /// back as `None` (Go would not write it to XML either).
    pub(crate) mod omit {
        use super::*;

        /// `None` as the zero value.
        pub(crate) fn to<T: GoJson + Default>(o: &Option<T>) -> Value {
            match o {
                Some(x) => x.to_go(),
                None => T::default().to_go(),
            }
        }

        /// The zero value as `None`.
        pub(crate) fn from<T: GoJson + Default + PartialEq>(
            v: &Value,
            at: &Path<'_>,
        ) -> Result<Option<T>, GoJsonError> {
            let x = T::from_go(v, at)?;
            Ok(if x == T::default() { None } else { Some(x) })
        }
    }

    /// A `*metav1.Time`: `null`, or the time in UTC with whole seconds (`2024-05-01T10:00:00Z`) —
    /// Go's JSON form, while its XML form (which the model keeps) has nanoseconds and any offset.
    pub(crate) mod time {
        use super::*;

        /// Go's JSON text of the time; text that is not RFC 3339 is written unchanged.
        pub(crate) fn to(o: &Option<String>) -> Value {
            match o {
                Some(s) => Value::String(normalize(s)),
                None => Value::Null,
            }
        }

        /// The text as read.
        pub(crate) fn from(v: &Value, at: &Path<'_>) -> Result<Option<String>, GoJsonError> {
            Option::<String>::from_go(v, at)
        }

        /// RFC 3339 text as `metav1.Time` marshals it to JSON.
        pub(crate) fn normalize(s: &str) -> String {
            use kvrs_api::time::{format_time, parse_time};
            parse_time(s).map_or_else(|| s.to_string(), format_time)
        }
    }
}

/// Implements [`GoJson`] for a model struct by listing its Go fields in Go's declaration order.
///
/// Entries (each followed by a comma):
/// - `"GoName" => field` or `"GoName" => field.inner`: the field with its own [`GoJson`] impl;
/// - `"GoName" => field as mode`: through `modes::mode` (e.g. `omit` for `""`/`0` ⇔ `None`);
/// - `"GoName" = expr`: a Go field the model does not carry, always written as `expr` and
///   ignored on input.
macro_rules! go_struct {
    ($ty:ty { $($body:tt)* }) => {
        impl $crate::gojson::GoJson for $ty {
            fn to_go(&self) -> ::serde_json::Value {
                let s = self;
                #[allow(unused_mut)]
                let mut m = ::serde_json::Map::new();
                $crate::gojson::go_struct!(@to s m $($body)*);
                let _ = s;
                ::serde_json::Value::Object(m)
            }
            fn from_go(
                v: &::serde_json::Value,
                at: &$crate::gojson::Path<'_>,
            ) -> ::std::result::Result<Self, $crate::gojson::GoJsonError> {
                #[allow(unused_mut)]
                let mut out = <$ty>::default();
                let Some(obj) = $crate::gojson::object(v, at)? else { return Ok(out) };
                $crate::gojson::go_struct!(@from obj out at $($body)*);
                let _ = obj;
                Ok(out)
            }
        }
    };
    (@to $s:ident $m:ident) => {};
    (@to $s:ident $m:ident $key:literal => $($f:ident).+ as $mode:ident, $($rest:tt)*) => {
        $m.insert($key.to_string(), $crate::gojson::modes::$mode::to(&$s.$($f).+));
        $crate::gojson::go_struct!(@to $s $m $($rest)*);
    };
    (@to $s:ident $m:ident $key:literal => $($f:ident).+, $($rest:tt)*) => {
        $m.insert($key.to_string(), $crate::gojson::GoJson::to_go(&$s.$($f).+));
        $crate::gojson::go_struct!(@to $s $m $($rest)*);
    };
    (@to $s:ident $m:ident $key:literal = $e:expr, $($rest:tt)*) => {
        $m.insert($key.to_string(), $e);
        $crate::gojson::go_struct!(@to $s $m $($rest)*);
    };
    (@from $o:ident $out:ident $at:ident) => {};
    (@from $o:ident $out:ident $at:ident $key:literal => $($f:ident).+ as $mode:ident, $($rest:tt)*) => {
        if let Some(x) = $o.get($key) {
            $out.$($f).+ = $crate::gojson::modes::$mode::from(x, &$at.key($key))?;
        }
        $crate::gojson::go_struct!(@from $o $out $at $($rest)*);
    };
    (@from $o:ident $out:ident $at:ident $key:literal => $($f:ident).+, $($rest:tt)*) => {
        if let Some(x) = $o.get($key) {
            $out.$($f).+ = $crate::gojson::GoJson::from_go(x, &$at.key($key))?;
        }
        $crate::gojson::go_struct!(@from $o $out $at $($rest)*);
    };
    (@from $o:ident $out:ident $at:ident $key:literal = $e:expr, $($rest:tt)*) => {
        $crate::gojson::go_struct!(@from $o $out $at $($rest)*);
    };
}

pub(crate) use go_struct;
