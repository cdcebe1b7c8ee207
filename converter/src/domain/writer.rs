//! A small serde serializer that writes the domain model as XML directly into a `String`.
//!
//! It understands exactly the conventions of this model (`@name` fields are attributes, `$text`
//! is character data, `Option`s are skipped by the derive, a `Vec` field repeats its element) and
//! does no name validation, which makes it several times faster than a general XML serializer.
//! Attributes that follow child elements in field order (Go's struct order, e.g. `<disk model>`)
//! are inserted back into the start tag.

use serde::ser::{self, Impossible, Serialize};
use std::fmt::{self, Write as _};

/// Why writing failed (only on value kinds the model never uses).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WriteError(String);

impl ser::Error for WriteError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        WriteError(msg.to_string())
    }
}

type R<T = ()> = Result<T, WriteError>;

/// Writes `value` as the root element `root`.
pub fn to_string<T: Serialize>(value: &T, root: &str, indent: bool, capacity: usize) -> R<String> {
    // Start at the largest output this thread has written so far (never below `capacity`), so a
    // big domain is written into one allocation instead of growing (and copying) several times.
    let capacity = LAST_LEN.with(|c| c.get()).max(capacity);
    let mut w = Writer {
        out: String::with_capacity(capacity),
        indent,
        depth: 0,
        scratch: String::new(),
    };
    value.serialize(ElementSer {
        w: &mut w,
        name: root,
    })?;
    let len = w.out.len();
    if len > capacity {
        LAST_LEN.with(|c| c.set(len.min(MAX_HINT)));
    }
    Ok(w.out)
}

/// Upper bound of the remembered output size (a freak huge domain must not make every later
/// allocation huge).
const MAX_HINT: usize = 1 << 20;

thread_local! {
    /// The largest output written on this thread, as the next output's starting capacity.
    static LAST_LEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Appends the decimal digits of `v` without going through `core::fmt`.
fn push_u64(out: &mut String, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or_default());
}

/// Appends `v` in decimal, `-` first when negative (same text as `Display`).
fn push_i64(out: &mut String, v: i64) {
    if v < 0 {
        out.push('-');
    }
    push_u64(out, v.unsigned_abs());
}

struct Writer {
    out: String,
    indent: bool,
    depth: usize,
    /// Reused for attributes that must be inserted back into an already closed start tag.
    scratch: String,
}

impl Writer {
    fn newline(&mut self) {
        if self.indent && !self.out.is_empty() {
            self.out.push('\n');
            for _ in 0..self.depth {
                self.out.push('\t');
            }
        }
    }
}

fn escape_into(out: &mut String, s: &str, attr: bool) {
    // Almost no value needs escaping: one branch-free pass (vectorised) finds out, then one copy.
    let special = s.bytes().fold(false, |acc, b| {
        acc | (b == b'&') | (b == b'<') | (b == b'>') | (attr & (b == b'"'))
    });
    if !special {
        out.push_str(s);
        return;
    }
    let mut last = 0;
    for (i, b) in s.bytes().enumerate() {
        let rep = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' if attr => "&quot;",
            _ => continue,
        };
        out.push_str(&s[last..i]);
        out.push_str(rep);
        last = i + 1;
    }
    out.push_str(&s[last..]);
}

/// Serializes one value as the element `name` (a field of its parent).
struct ElementSer<'w> {
    w: &'w mut Writer,
    name: &'w str,
}

impl ElementSer<'_> {
    fn text(self, s: &str) -> R {
        self.w.newline();
        let out = &mut self.w.out;
        out.push('<');
        out.push_str(self.name);
        out.push('>');
        escape_into(out, s, false);
        out.push_str("</");
        out.push_str(self.name);
        out.push('>');
        Ok(())
    }
    fn display(self, v: impl fmt::Display) -> R {
        self.w.newline();
        let name = self.name;
        let _ = write!(self.w.out, "<{name}>{v}</{name}>");
        Ok(())
    }
}

macro_rules! display_fns {
    ($($f:ident: $t:ty),*) => { $(fn $f(self, v: $t) -> R { self.display(v) })* };
}

macro_rules! int_fns {
    ($push:ident as $w:ty: $($f:ident: $t:ty),*) => { $(fn $f(self, v: $t) -> R {
        self.w.newline();
        let out = &mut self.w.out;
        out.push('<');
        out.push_str(self.name);
        out.push('>');
        $push(out, v as $w);
        out.push_str("</");
        out.push_str(self.name);
        out.push('>');
        Ok(())
    })* };
}

impl<'w> ser::Serializer for ElementSer<'w> {
    type Ok = ();
    type Error = WriteError;
    type SerializeSeq = SeqSer<'w>;
    type SerializeTuple = Impossible<(), WriteError>;
    type SerializeTupleStruct = Impossible<(), WriteError>;
    type SerializeTupleVariant = Impossible<(), WriteError>;
    type SerializeMap = Impossible<(), WriteError>;
    type SerializeStruct = StructSer<'w>;
    type SerializeStructVariant = Impossible<(), WriteError>;

    display_fns!(serialize_bool: bool, serialize_f32: f32, serialize_f64: f64, serialize_char: char);
    int_fns!(push_i64 as i64: serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64);
    int_fns!(push_u64 as u64: serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64);

    fn serialize_str(self, v: &str) -> R {
        self.text(v)
    }
    fn serialize_bytes(self, _: &[u8]) -> R {
        Err(WriteError("bytes are not supported".into()))
    }
    fn serialize_none(self) -> R {
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> R {
        v.serialize(self)
    }
    fn serialize_unit(self) -> R {
        self.w.newline();
        self.w.out.push('<');
        self.w.out.push_str(self.name);
        self.w.out.push_str("/>");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> R {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> R {
        self.text(v)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, v: &T) -> R {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> R {
        Err(WriteError("enum variants are not supported".into()))
    }
    fn serialize_seq(self, _: Option<usize>) -> R<SeqSer<'w>> {
        Ok(SeqSer {
            w: self.w,
            name: self.name,
        })
    }
    fn serialize_tuple(self, _: usize) -> R<Self::SerializeTuple> {
        Err(WriteError("tuples are not supported".into()))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> R<Self::SerializeTupleStruct> {
        Err(WriteError("tuple structs are not supported".into()))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> R<Self::SerializeTupleVariant> {
        Err(WriteError("enum variants are not supported".into()))
    }
    fn serialize_map(self, _: Option<usize>) -> R<Self::SerializeMap> {
        Err(WriteError("maps are not supported".into()))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> R<StructSer<'w>> {
        self.w.newline();
        self.w.out.push('<');
        self.w.out.push_str(self.name);
        let attr_pos = self.w.out.len();
        self.w.depth += 1;
        Ok(StructSer {
            w: self.w,
            name: self.name,
            attr_pos,
            open: true,
            child_elements: false,
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> R<Self::SerializeStructVariant> {
        Err(WriteError("enum variants are not supported".into()))
    }
}

/// A `Vec` field: each item is one element of the field's name.
struct SeqSer<'w> {
    w: &'w mut Writer,
    name: &'w str,
}

impl ser::SerializeSeq for SeqSer<'_> {
    type Ok = ();
    type Error = WriteError;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> R {
        v.serialize(ElementSer {
            w: self.w,
            name: self.name,
        })
    }
    fn end(self) -> R {
        Ok(())
    }
}

/// An element being written: attributes go into its start tag, everything else after it.
struct StructSer<'w> {
    w: &'w mut Writer,
    name: &'w str,
    /// Where the next attribute goes (end of the start tag's attributes).
    attr_pos: usize,
    /// The start tag is not closed with `>` yet.
    open: bool,
    child_elements: bool,
}

impl StructSer<'_> {
    fn close_start_tag(&mut self) {
        if self.open {
            self.w.out.push('>');
            self.open = false;
        }
    }
}

impl ser::SerializeStruct for StructSer<'_> {
    type Ok = ();
    type Error = WriteError;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, v: &T) -> R {
        if let Some(attr) = key.strip_prefix('@') {
            if self.open && self.attr_pos == self.w.out.len() {
                // Common case: still inside the start tag, write in place.
                let out = &mut self.w.out;
                let mark = out.len();
                out.push(' ');
                out.push_str(attr);
                out.push_str("=\"");
                if v.serialize(AttrSer {
                    out: &mut *out,
                    attr: true,
                })? {
                    out.push('"');
                } else {
                    out.truncate(mark);
                }
                self.attr_pos = out.len();
            } else {
                // Built in the writer's reusable scratch buffer (no allocation per attribute).
                let mut a = std::mem::take(&mut self.w.scratch);
                a.clear();
                a.push(' ');
                a.push_str(attr);
                a.push_str("=\"");
                if v.serialize(AttrSer {
                    out: &mut a,
                    attr: true,
                })? {
                    a.push('"');
                    self.w.out.insert_str(self.attr_pos, &a);
                    self.attr_pos += a.len();
                }
                self.w.scratch = a;
            }
            return Ok(());
        }
        if key == "$text" {
            self.close_start_tag();
            v.serialize(AttrSer {
                out: &mut self.w.out,
                attr: false,
            })?;
            return Ok(());
        }
        let was_open = self.open;
        self.close_start_tag();
        let before = self.w.out.len();
        v.serialize(ElementSer {
            w: self.w,
            name: key,
        })?;
        if self.w.out.len() != before {
            self.child_elements = true;
        } else if was_open {
            // Nothing written (an empty list): keep the start tag open for later attributes.
            self.w.out.truncate(before - 1);
            self.open = true;
        }
        Ok(())
    }
    fn end(self) -> R {
        self.w.depth -= 1;
        if self.open {
            self.w.out.push_str("/>");
            return Ok(());
        }
        if self.child_elements {
            self.w.newline();
        }
        self.w.out.push_str("</");
        self.w.out.push_str(self.name);
        self.w.out.push('>');
        Ok(())
    }
}

/// Turns a scalar into attribute / text content; returns whether there was a value.
struct AttrSer<'a> {
    out: &'a mut String,
    /// Escape `"` too.
    attr: bool,
}

macro_rules! attr_display {
    ($($f:ident: $t:ty),*) => { $(fn $f(self, v: $t) -> R<bool> { let _ = write!(self.out, "{v}"); Ok(true) })* };
}

macro_rules! attr_int {
    ($push:ident as $w:ty: $($f:ident: $t:ty),*) => {
        $(fn $f(self, v: $t) -> R<bool> { $push(self.out, v as $w); Ok(true) })*
    };
}

impl ser::Serializer for AttrSer<'_> {
    type Ok = bool;
    type Error = WriteError;
    type SerializeSeq = Impossible<bool, WriteError>;
    type SerializeTuple = Impossible<bool, WriteError>;
    type SerializeTupleStruct = Impossible<bool, WriteError>;
    type SerializeTupleVariant = Impossible<bool, WriteError>;
    type SerializeMap = Impossible<bool, WriteError>;
    type SerializeStruct = Impossible<bool, WriteError>;
    type SerializeStructVariant = Impossible<bool, WriteError>;

    attr_display!(serialize_bool: bool, serialize_f32: f32, serialize_f64: f64, serialize_char: char);
    attr_int!(push_i64 as i64: serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64);
    attr_int!(push_u64 as u64: serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64);

    fn serialize_str(self, v: &str) -> R<bool> {
        escape_into(self.out, v, self.attr);
        Ok(true)
    }
    fn serialize_bytes(self, _: &[u8]) -> R<bool> {
        Err(WriteError("bytes are not supported".into()))
    }
    fn serialize_none(self) -> R<bool> {
        Ok(false)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> R<bool> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> R<bool> {
        Ok(true)
    }
    fn serialize_unit_struct(self, _: &'static str) -> R<bool> {
        Ok(true)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> R<bool> {
        self.out.push_str(v);
        Ok(true)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, v: &T) -> R<bool> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> R<bool> {
        Err(WriteError(
            "enum variants are not supported in attributes".into(),
        ))
    }
    fn serialize_seq(self, _: Option<usize>) -> R<Self::SerializeSeq> {
        Err(WriteError("lists are not supported in attributes".into()))
    }
    fn serialize_tuple(self, _: usize) -> R<Self::SerializeTuple> {
        Err(WriteError("tuples are not supported in attributes".into()))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> R<Self::SerializeTupleStruct> {
        Err(WriteError("tuples are not supported in attributes".into()))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> R<Self::SerializeTupleVariant> {
        Err(WriteError(
            "enum variants are not supported in attributes".into(),
        ))
    }
    fn serialize_map(self, _: Option<usize>) -> R<Self::SerializeMap> {
        Err(WriteError("maps are not supported in attributes".into()))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> R<Self::SerializeStruct> {
        Err(WriteError("structs are not supported in attributes".into()))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> R<Self::SerializeStructVariant> {
        Err(WriteError(
            "enum variants are not supported in attributes".into(),
        ))
    }
}
