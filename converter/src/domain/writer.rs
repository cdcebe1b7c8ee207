//! A small serde serializer that writes the domain model as XML directly into a `String`.
//!
//! It understands exactly the conventions of this model (`@name` fields are attributes, `$text`
//! is character data, `Option`s are skipped by the derive, a `Vec` field repeats its element) and
//! does no name validation, which makes it several times faster than a general XML serializer.
//! Attributes that follow child elements in field order (Go's struct order, e.g. `<disk model>`)
//! are inserted back into the start tag.

use serde::ser::{self, Impossible, Serialize};
use std::fmt;

/// Why writing failed: a string holds a code point XML 1.0 cannot carry (C0 controls other than
/// tab, newline and carriage return; U+FFFE, U+FFFF), or a value kind the model never uses.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", self.location())]
pub struct WriteError {
    reason: String,
    /// Where, innermost first (`serial`, `disk[2]`, `devices`, `domain`): filled in while the
    /// error travels up, so writing pays nothing for it.
    path: Vec<String>,
}

impl WriteError {
    fn new(reason: impl Into<String>) -> Self {
        WriteError {
            reason: reason.into(),
            path: Vec::new(),
        }
    }

    /// Adds the enclosing element, attribute or list item.
    fn within(mut self, part: impl Into<String>) -> Self {
        self.path.push(part.into());
        self
    }

    /// Where in the document: an XPath such as `/domain/devices/disk[2]/serial`.
    pub fn location(&self) -> String {
        let mut out = String::new();
        for part in self.path.iter().rev() {
            if !part.starts_with('[') {
                out.push('/');
            }
            out.push_str(part);
        }
        out
    }

    /// What is wrong, without the location.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl ser::Error for WriteError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        WriteError::new(msg.to_string())
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
    value
        .serialize(ElementSer {
            w: &mut w,
            name: root,
        })
        .map_err(|e| e.within(root))?;
    let len = w.out.len();
    if len > capacity {
        LAST_LEN.with(|c| c.set(len.min(MAX_HINT)));
    }
    Ok(w.out)
}

/// The largest domain XML written: libvirt's `REMOTE_STRING_MAX` (4 MiB), the longest string
/// its remote protocol carries — `virDomainDefineXML` refuses anything longer, so writing more
/// only costs memory (issue 17: thousands of devices rendered hundreds of MB). Checked as each
/// element closes, so a runaway document stops near the bound.
pub const MAX_XML_BYTES: usize = 4 << 20;

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
            // One copy of a prefix of a constant instead of a push per tab (the writer's most
            // frequent operation); deeper nesting than the constant holds falls back to pushes.
            const NEWLINE_TABS: &str = "\n\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t";
            match NEWLINE_TABS.get(..=self.depth) {
                Some(prefix) => self.out.push_str(prefix),
                None => {
                    self.out.push_str(NEWLINE_TABS);
                    for _ in NEWLINE_TABS.len()..=self.depth {
                        self.out.push('\t');
                    }
                }
            }
        }
    }
}

/// [`SPECIAL`] bit: the byte needs care in text.
const SPECIAL_TEXT: u8 = 1;
/// [`SPECIAL`] bit: the byte needs care in an attribute value.
const SPECIAL_ATTR: u8 = 2;

/// Per byte, whether [`escape_into`] must look closer: C0 controls, `&`, `<`, `>` (both), `"`
/// (attributes only), and 0xEF, which leads the UTF-8 of U+F000..U+FFFF (U+FFFE and U+FFFF).
static SPECIAL: [u8; 256] = {
    let mut t = [0u8; 256];
    let both = SPECIAL_TEXT | SPECIAL_ATTR;
    let mut b = 0;
    while b < 0x20 {
        t[b] = both;
        b += 1;
    }
    t[b'&' as usize] = both;
    t[b'<' as usize] = both;
    t[b'>' as usize] = both;
    t[0xEF] = both;
    t[b'"' as usize] = SPECIAL_ATTR;
    t
};

/// Whether any byte of `s` is one [`escape_into`] must look at closely. Whole 16-byte blocks
/// are tested branch-free (the compiler turns a fixed-size block into vector compares: paths and
/// UUIDs are long); the short rest, and most values are short, by one table look-up per byte.
fn needs_care(s: &[u8], attr: bool) -> bool {
    let mut blocks = s.chunks_exact(16);
    for block in &mut blocks {
        let hit = block.iter().fold(false, |acc, &b| {
            acc | (b < 0x20)
                | (b == b'&')
                | (b == b'<')
                | (b == b'>')
                | (attr & (b == b'"'))
                | (b == 0xEF)
        });
        if hit {
            return true;
        }
    }
    let mask = if attr { SPECIAL_ATTR } else { SPECIAL_TEXT };
    blocks
        .remainder()
        .iter()
        .any(|&b| SPECIAL[usize::from(b)] & mask != 0)
}

/// The one escaping routine of every string the writer puts in a document (text and attribute
/// values), so that a conforming XML 1.0 parser reads back exactly `s`:
/// - `&`, `<`, `>` (and `"` in attributes) as entities;
/// - `\r` as `&#13;` everywhere (a parser turns a raw one into `\n`), and `\t`, `\n` in
///   attributes as `&#9;`, `&#10;` (attribute-value normalisation turns raw ones into spaces);
/// - code points XML 1.0's `Char` production excludes even as character references (C0 controls
///   other than tab, newline and carriage return; U+FFFE and U+FFFF; surrogates cannot occur in
///   a `str`) are refused: there is no way to write them.
fn escape_into(out: &mut String, s: &str, attr: bool) -> R {
    // Almost no value needs escaping: one pass finds out, then one copy.
    if !needs_care(s.as_bytes(), attr) {
        out.push_str(s);
        return Ok(());
    }
    let mut last = 0;
    for (i, c) in s.char_indices() {
        let rep = match c {
            '&' => "&amp;",
            '<' => "&lt;",
            '>' => "&gt;",
            '"' if attr => "&quot;",
            '\r' => "&#13;",
            '\t' if attr => "&#9;",
            '\n' if attr => "&#10;",
            '\t' | '\n' => continue,
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => {
                return Err(WriteError::new(format!(
                    "{} holds U+{:04X}, a character XML 1.0 does not allow",
                    excerpt(s),
                    u32::from(c)
                )));
            }
            _ => continue,
        };
        out.push_str(&s[last..i]);
        out.push_str(rep);
        last = i + c.len_utf8();
    }
    out.push_str(&s[last..]);
    Ok(())
}

/// The value as errors quote it: at most 40 characters, escapes as Rust writes them.
fn excerpt(s: &str) -> String {
    const MAX: usize = 40;
    match s.char_indices().nth(MAX) {
        Some((end, _)) => format!("{:?}...", &s[..end]),
        None => format!("{s:?}"),
    }
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
        escape_into(out, s, false)?;
        out.push_str("</");
        out.push_str(self.name);
        out.push('>');
        Ok(())
    }
    fn display(self, v: impl fmt::Display) -> R {
        // Booleans, floats and chars: a char may need escaping like any string.
        let text = v.to_string();
        self.text(&text)
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

    display_fns!(serialize_f32: f32, serialize_f64: f64, serialize_char: char);

    fn serialize_bool(self, v: bool) -> R {
        self.text(if v { "true" } else { "false" })
    }
    int_fns!(push_i64 as i64: serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64);
    int_fns!(push_u64 as u64: serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64);

    fn serialize_str(self, v: &str) -> R {
        self.text(v)
    }
    fn serialize_bytes(self, _: &[u8]) -> R {
        Err(WriteError::new("bytes are not supported"))
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
        Err(WriteError::new("enum variants are not supported"))
    }
    fn serialize_seq(self, _: Option<usize>) -> R<SeqSer<'w>> {
        Ok(SeqSer {
            w: self.w,
            name: self.name,
            index: 0,
        })
    }
    fn serialize_tuple(self, _: usize) -> R<Self::SerializeTuple> {
        Err(WriteError::new("tuples are not supported"))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> R<Self::SerializeTupleStruct> {
        Err(WriteError::new("tuple structs are not supported"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> R<Self::SerializeTupleVariant> {
        Err(WriteError::new("enum variants are not supported"))
    }
    fn serialize_map(self, _: Option<usize>) -> R<Self::SerializeMap> {
        Err(WriteError::new("maps are not supported"))
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
        Err(WriteError::new("enum variants are not supported"))
    }
}

/// A `Vec` field: each item is one element of the field's name.
struct SeqSer<'w> {
    w: &'w mut Writer,
    name: &'w str,
    /// Items written so far (errors name the item, 1-based as in XPath).
    index: usize,
}

impl ser::SerializeSeq for SeqSer<'_> {
    type Ok = ();
    type Error = WriteError;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> R {
        self.index += 1;
        v.serialize(ElementSer {
            w: self.w,
            name: self.name,
        })
        .map_err(|e| e.within(format!("[{}]", self.index)))
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
                })
                .map_err(|e| e.within(key))?
                {
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
                })
                .map_err(|e| e.within(key))?
                {
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
        })
        .map_err(|e| e.within(key))?;
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
        if self.w.out.len() > MAX_XML_BYTES {
            return Err(WriteError::new(format!(
                "the domain XML is longer than {MAX_XML_BYTES} bytes, the most libvirt accepts \
                 (REMOTE_STRING_MAX)"
            )));
        }
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
    ($($f:ident: $t:ty),*) => { $(fn $f(self, v: $t) -> R<bool> {
        let text = v.to_string();
        escape_into(self.out, &text, self.attr)?;
        Ok(true)
    })* };
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

    attr_display!(serialize_f32: f32, serialize_f64: f64, serialize_char: char);

    fn serialize_bool(self, v: bool) -> R<bool> {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(true)
    }
    attr_int!(push_i64 as i64: serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64);
    attr_int!(push_u64 as u64: serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64);

    fn serialize_str(self, v: &str) -> R<bool> {
        escape_into(self.out, v, self.attr)?;
        Ok(true)
    }
    fn serialize_bytes(self, _: &[u8]) -> R<bool> {
        Err(WriteError::new("bytes are not supported"))
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
        Err(WriteError::new(
            "enum variants are not supported in attributes",
        ))
    }
    fn serialize_seq(self, _: Option<usize>) -> R<Self::SerializeSeq> {
        Err(WriteError::new("lists are not supported in attributes"))
    }
    fn serialize_tuple(self, _: usize) -> R<Self::SerializeTuple> {
        Err(WriteError::new("tuples are not supported in attributes"))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> R<Self::SerializeTupleStruct> {
        Err(WriteError::new("tuples are not supported in attributes"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> R<Self::SerializeTupleVariant> {
        Err(WriteError::new(
            "enum variants are not supported in attributes",
        ))
    }
    fn serialize_map(self, _: Option<usize>) -> R<Self::SerializeMap> {
        Err(WriteError::new("maps are not supported in attributes"))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> R<Self::SerializeStruct> {
        Err(WriteError::new("structs are not supported in attributes"))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> R<Self::SerializeStructVariant> {
        Err(WriteError::new(
            "enum variants are not supported in attributes",
        ))
    }
}
