//! The domain model's XML writer: text appended straight into one `String`.
//!
//! Each model struct derives [`XmlElement`] (`kvrs-converter-xml-derive`) from its serde
//! attributes, the same ones quick-xml parses with: `@name` fields are attributes, `$text` is
//! character data, any other field a child element, a `Vec` field repeats its element, `Option`s
//! and `skip_serializing_if` leave fields out. The generated code writes constant tags
//! (`<disk`, ` type="`, `</disk>`) and calls the small routines here for the values: no serde
//! round, no per-element allocation, no name validation.

/// Why writing failed: a string holds a code point XML 1.0 cannot carry (C0 controls other than
/// tab, newline and carriage return; U+FFFE, U+FFFF), or the document outgrew [`MAX_XML_BYTES`].
///
/// Boxed: every step of the writer returns a `Result<(), WriteError>`, which stays one pointer
/// wide (and `Ok` a null test) instead of a 48-byte value copied through every level.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}", self.location(), self.0.reason)]
pub struct WriteError(Box<WriteErrorInner>);

#[derive(Debug)]
struct WriteErrorInner {
    reason: String,
    /// Where, innermost first (`serial`, `disk[2]`, `devices`, `domain`): filled in while the
    /// error travels up, so writing pays nothing for it.
    path: Vec<String>,
}

impl WriteError {
    #[cold]
    fn new(reason: impl Into<String>) -> Self {
        WriteError(Box::new(WriteErrorInner {
            reason: reason.into(),
            path: Vec::new(),
        }))
    }

    /// Adds the enclosing element, attribute or list item (the generated writers call it as an
    /// error travels up).
    #[cold]
    #[inline(never)]
    #[must_use]
    pub(crate) fn within(mut self, part: impl Into<String>) -> Self {
        self.0.path.push(part.into());
        self
    }

    /// Where in the document: an XPath such as `/domain/devices/disk[2]/serial`.
    pub fn location(&self) -> String {
        let mut out = String::new();
        for part in self.0.path.iter().rev() {
            if !part.starts_with('[') {
                out.push('/');
            }
            out.push_str(part);
        }
        out
    }

    /// What is wrong, without the location.
    pub fn reason(&self) -> &str {
        &self.0.reason
    }
}

type R<T = ()> = Result<T, WriteError>;

use std::cell::Cell;

/// An element's name as a type: the generated writers are instantiated per tag, so the start
/// and end tags they copy are constants (a few stores each, no call to `memcpy`, no length).
pub(crate) trait TagName {
    /// `<name`.
    const OPEN: &'static str;
    /// `<name>`: the start tag of a scalar element, one copy instead of `<name` and `>`.
    const OPEN_END: &'static str;
    /// `</name>`.
    const CLOSE: &'static str;
}

/// A value written as an element of the given tag: a model struct (derived), a scalar as
/// `<name>text</name>`, or nothing (`None`), or one element per item (`Vec`).
pub(crate) trait XmlElement {
    /// Appends the element (preceded by a newline and indentation when indenting).
    fn write_element<N: TagName>(&self, w: &mut Writer) -> R;
}

/// A value written as an attribute: ` name="value"`, or nothing when `None`.
///
/// The generated writers copy ` name="` (or `" name="`, closing the attribute before), then
/// the value; the closing quote goes out with what follows (the next name, `">` or `"/>`).
pub(crate) trait XmlAttr {
    /// Whether the attribute is written at all (`None` is not).
    #[inline(always)]
    fn present(&self) -> bool {
        true
    }

    /// Appends the escaped value, without name or quotes.
    fn write_value(&self, w: &mut Writer) -> R;
}

/// A value written as an element's character data.
pub(crate) trait XmlText {
    /// Appends the escaped text.
    fn write_text(&self, w: &mut Writer) -> R;
}

/// Writes `value` as the root element `root` (`name` for error locations).
pub(crate) fn to_string<T: XmlElement, N: TagName>(
    value: &T,
    name: &str,
    indent: bool,
    capacity: usize,
) -> R<String> {
    // Start at the largest output this thread has written so far (never below `capacity`), so a
    // big domain is written into one allocation instead of growing (and copying) several times.
    let capacity = LAST_LEN.with(|c| c.get()).max(capacity);
    let mut w = Writer {
        out: String::with_capacity(capacity),
        newline_after: if indent { 0 } else { usize::MAX },
        depth: 0,
    };
    value
        .write_element::<N>(&mut w)
        .and_then(|()| w.check_size())
        .map_err(|e| e.within(name))?;
    let len = w.out.len();
    if len > capacity {
        LAST_LEN.with(|c| c.set(len.min(MAX_HINT)));
    }
    Ok(w.out)
}

/// The largest domain XML written: libvirt's `REMOTE_STRING_MAX` (4 MiB), the longest string
/// its remote protocol carries — `virDomainDefineXML` refuses anything longer, so writing more
/// only costs memory (issue 17: thousands of devices rendered hundreds of MB). Checked after each
/// item of a list (the only part of the model that can repeat without bound; any other element
/// is a fixed set of fields) and once at the end, so a runaway document stops near the bound.
pub const MAX_XML_BYTES: usize = 4 << 20;

/// Upper bound of the remembered output size (a freak huge domain must not make every later
/// allocation huge).
const MAX_HINT: usize = 1 << 20;

thread_local! {
    /// The largest output written on this thread, as the next output's starting capacity.
    static LAST_LEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A newline and the indentation of up to 15 levels.
const NEWLINE_TABS: &str = "\n\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t";

/// The output being written and where in the tree the writer is.
pub(crate) struct Writer {
    out: String,
    /// Newlines are written once the output is longer than this: 0 when indenting (every
    /// element but the root starts a line), `usize::MAX` for compact output. One comparison
    /// where a flag and an emptiness test took two.
    newline_after: usize,
    depth: usize,
}

impl Writer {
    /// Appends constant text (a tag part).
    #[inline]
    pub(crate) fn push(&mut self, s: &'static str) {
        self.out.push_str(s);
    }

    #[inline(always)]
    fn newline(&mut self) {
        if self.out.len() > self.newline_after {
            // One fixed-size copy of a newline and 15 tabs, cut back to the depth: a 16-byte
            // store instead of a variable-length copy (the writer's most frequent operation).
            if self.depth < NEWLINE_TABS.len() {
                let keep = self.out.len() + 1 + self.depth;
                self.out.push_str(NEWLINE_TABS);
                self.out.truncate(keep);
            } else {
                self.deep_newline();
            }
        }
    }

    /// [`Writer::newline`] nested deeper than [`NEWLINE_TABS`] holds.
    #[cold]
    #[inline(never)]
    fn deep_newline(&mut self) {
        self.out.push_str(NEWLINE_TABS);
        for _ in NEWLINE_TABS.len()..=self.depth {
            self.out.push('\t');
        }
    }

    /// Begins a struct's element: its line and `<name`; attributes follow.
    #[inline]
    pub(crate) fn start<N: TagName>(&mut self) {
        self.newline();
        self.out.push_str(N::OPEN);
        self.depth += 1;
    }

    /// Closes the start tag of an element with children (and its last attribute, when
    /// `quoted`); returns where the children begin.
    #[inline]
    pub(crate) fn open_body(&mut self, quoted: bool) -> usize {
        if quoted {
            self.out.push_str("\">");
        } else {
            self.out.push('>');
        }
        self.out.len()
    }

    /// Ends an element begun with [`Writer::open_body`]: on its own line after children, or as
    /// an empty-element tag when no child was written (all lists empty, all options unset).
    #[inline]
    pub(crate) fn end_body<N: TagName>(&mut self, body: usize) -> R {
        self.depth -= 1;
        if self.out.len() == body {
            self.out.truncate(body - 1);
            self.out.push_str("/>");
        } else {
            self.newline();
            self.out.push_str(N::CLOSE);
        }
        Ok(())
    }

    /// Ends an element of attributes only: `/>` (`"/>` when `quoted`, closing the last
    /// attribute).
    #[inline]
    pub(crate) fn end_empty(&mut self, quoted: bool) -> R {
        self.depth -= 1;
        if quoted {
            self.out.push_str("\"/>");
        } else {
            self.out.push_str("/>");
        }
        Ok(())
    }

    /// Ends an element with character data: `</name>` right after the text.
    #[inline]
    pub(crate) fn end_text<N: TagName>(&mut self) -> R {
        self.depth -= 1;
        self.out.push_str(N::CLOSE);
        Ok(())
    }

    #[inline]
    fn check_size(&self) -> R {
        if self.out.len() > MAX_XML_BYTES {
            return Err(too_long());
        }
        Ok(())
    }

    /// `<name>text</name>` on its own line, for a scalar element.
    #[inline]
    fn text_element<N: TagName>(&mut self, text: impl FnOnce(&mut String) -> R) -> R {
        self.newline();
        self.out.push_str(N::OPEN_END);
        text(&mut self.out)?;
        self.out.push_str(N::CLOSE);
        Ok(())
    }
}

#[cold]
fn too_long() -> WriteError {
    WriteError::new(format!(
        "the domain XML is longer than {MAX_XML_BYTES} bytes, the most libvirt accepts \
         (REMOTE_STRING_MAX)"
    ))
}

/// Appends the decimal digits of `v` without going through `core::fmt`.
#[inline]
fn push_int(out: &mut String, v: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(v));
}

macro_rules! str_impls {
    ($($t:ty),*) => {$(
        impl XmlElement for $t {
            #[inline]
            fn write_element<N: TagName>(&self, w: &mut Writer) -> R {
                w.text_element::<N>(|out| escape_into(out, self, false))
            }
        }
        impl XmlAttr for $t {
            #[inline(always)]
            fn write_value(&self, w: &mut Writer) -> R {
                escape_into(&mut w.out, self, true)
            }
        }
        impl XmlText for $t {
            #[inline]
            fn write_text(&self, w: &mut Writer) -> R {
                escape_into(&mut w.out, self, false)
            }
        }
    )*};
}
str_impls!(String);

thread_local! {
    /// Constants (`Str::Borrowed`) already found plain (nothing to escape, even in attributes),
    /// as (address, length), direct-mapped by address. A `&'static str` is immutable for the
    /// rest of the program, so once plain it stays plain: the model's constants (`virtio`, `on`,
    /// `unix`, most values of a domain) are checked once per thread instead of once per
    /// document.
    static PLAIN: [Cell<(usize, usize)>; PLAIN_SLOTS] =
        const { [const { Cell::new((0, 0)) }; PLAIN_SLOTS] };
}

/// Appends a model string: a constant found plain before is copied as it is, anything else
/// goes through [`escape_into`].
#[inline(always)]
fn write_str(out: &mut String, s: &super::Str, attr: bool) -> R {
    match s {
        std::borrow::Cow::Borrowed(c) => write_constant(out, c, attr),
        std::borrow::Cow::Owned(o) => escape_into(out, o, attr),
    }
}

/// Slots of [`PLAIN`]: a domain uses some 50 to 100 distinct constants. Direct-mapped, two of
/// them in one slot evict each other on every document (which ones depends on where the linker
/// puts them); 2048 slots (32 KiB per thread) make that rare.
const PLAIN_SLOTS: usize = 2048;
/// Right shift that leaves the top log2([`PLAIN_SLOTS`]) bits of the hash.
const PLAIN_SHIFT: u32 = usize::BITS - PLAIN_SLOTS.trailing_zeros();

/// A constant's slot in [`PLAIN`]: Fibonacci hashing of its address (the top bits of the
/// product). The slot holds address and length both (a constant can start where a longer one
/// does), compared as they are: no packing into one word, no range checks on either.
#[inline(always)]
fn plain_slot(addr: usize) -> usize {
    #[cfg(target_pointer_width = "64")]
    const GOLDEN: usize = 0x9E37_79B9_7F4A_7C15;
    #[cfg(not(target_pointer_width = "64"))]
    const GOLDEN: usize = 0x9E37_79B9;
    (addr.wrapping_mul(GOLDEN) >> PLAIN_SHIFT) % PLAIN_SLOTS
}

#[inline(always)]
fn write_constant(out: &mut String, c: &'static str, attr: bool) -> R {
    let key = (c.as_ptr().addr(), c.len());
    let slot = plain_slot(key.0);
    if PLAIN.with(|t| t[slot].get() == key) {
        out.push_str(c);
        return Ok(());
    }
    if needs_care(c.as_bytes(), true) {
        return escape_into(out, c, attr);
    }
    PLAIN.with(|t| t[slot].set(key));
    out.push_str(c);
    Ok(())
}

impl XmlElement for super::Str {
    #[inline]
    fn write_element<N: TagName>(&self, w: &mut Writer) -> R {
        w.text_element::<N>(|out| write_str(out, self, false))
    }
}

impl XmlAttr for super::Str {
    #[inline(always)]
    fn write_value(&self, w: &mut Writer) -> R {
        write_str(&mut w.out, self, true)
    }
}

impl XmlText for super::Str {
    #[inline]
    fn write_text(&self, w: &mut Writer) -> R {
        write_str(&mut w.out, self, false)
    }
}

macro_rules! int_impls {
    ($($t:ty),*) => {$(
        impl XmlElement for $t {
            #[inline]
            fn write_element<N: TagName>(&self, w: &mut Writer) -> R {
                w.text_element::<N>(|out| {
                    push_int(out, *self);
                    Ok(())
                })
            }
        }
        impl XmlAttr for $t {
            #[inline(always)]
            fn write_value(&self, w: &mut Writer) -> R {
                push_int(&mut w.out, *self);
                Ok(())
            }
        }
        impl XmlText for $t {
            #[inline]
            fn write_text(&self, w: &mut Writer) -> R {
                push_int(&mut w.out, *self);
                Ok(())
            }
        }
    )*};
}
int_impls!(u8, u16, u32, u64, i8, i16, i32, i64);

impl XmlElement for bool {
    #[inline]
    fn write_element<N: TagName>(&self, w: &mut Writer) -> R {
        let text = if *self { "true" } else { "false" };
        w.text_element::<N>(|out| {
            out.push_str(text);
            Ok(())
        })
    }
}

impl XmlAttr for bool {
    #[inline(always)]
    fn write_value(&self, w: &mut Writer) -> R {
        if *self {
            w.out.push_str("true");
        } else {
            w.out.push_str("false");
        }
        Ok(())
    }
}

impl XmlText for bool {
    #[inline]
    fn write_text(&self, w: &mut Writer) -> R {
        w.out.push_str(if *self { "true" } else { "false" });
        Ok(())
    }
}

impl<T: XmlElement> XmlElement for Option<T> {
    #[inline]
    fn write_element<N: TagName>(&self, w: &mut Writer) -> R {
        match self {
            Some(v) => v.write_element::<N>(w),
            None => Ok(()),
        }
    }
}

impl<T: XmlAttr> XmlAttr for Option<T> {
    #[inline(always)]
    fn present(&self) -> bool {
        self.as_ref().is_some_and(T::present)
    }

    #[inline(always)]
    fn write_value(&self, w: &mut Writer) -> R {
        match self {
            Some(v) => v.write_value(w),
            None => Ok(()),
        }
    }
}

impl<T: XmlText> XmlText for Option<T> {
    #[inline]
    fn write_text(&self, w: &mut Writer) -> R {
        match self {
            Some(v) => v.write_text(w),
            None => Ok(()),
        }
    }
}

impl<T: XmlElement> XmlElement for Box<T> {
    #[inline]
    fn write_element<N: TagName>(&self, w: &mut Writer) -> R {
        (**self).write_element::<N>(w)
    }
}

impl<T: XmlElement> XmlElement for Vec<T> {
    fn write_element<N: TagName>(&self, w: &mut Writer) -> R {
        write_items::<N, T>(self, w)
    }
}

impl<A: smallvec::Array> XmlElement for smallvec::SmallVec<A>
where
    A::Item: XmlElement,
{
    fn write_element<N: TagName>(&self, w: &mut Writer) -> R {
        write_items::<N, A::Item>(self, w)
    }
}

/// One element per item of a list.
#[inline]
fn write_items<N: TagName, T: XmlElement>(items: &[T], w: &mut Writer) -> R {
    for (i, item) in items.iter().enumerate() {
        // Errors name the item, 1-based as in XPath.
        item.write_element::<N>(w)
            .and_then(|()| w.check_size())
            .map_err(|e| e.within(format!("[{}]", i + 1)))?;
    }
    Ok(())
}

/// Eight copies of a byte.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// Whether any of the eight bytes of `x` is one [`escape_into`] must look at closely: a C0
/// control, `&`, `<`, `>`, `"` or any byte of a non-ASCII character (which covers 0xEF, the
/// lead byte of U+F000..U+FFFF). Word-at-a-time ("SWAR") tests: `(v - 0x01..) & !v & 0x80..` is
/// non-zero exactly when a byte of `v` is zero; `((x - 0x20..) | x) & 0x80..` exactly when a
/// byte is below 0x20 or above 0x7F (a borrow only starts at a byte below 0x20). `"` is tested
/// together with `&` (they differ in bit 2 only), so text with a `"` takes the careful path for
/// nothing — rare, as are non-ASCII values, which the careful path copies unchanged: one test
/// for both ends of the byte range instead of two, on the writer's check of every built value.
#[inline]
fn word_needs_care(x: u64) -> bool {
    const HIGH: u64 = splat(0x80);
    let zero_byte = |v: u64| v.wrapping_sub(splat(0x01)) & !v & HIGH;
    let control_or_high = (x.wrapping_sub(splat(0x20)) | x) & HIGH;
    let amp_quot = zero_byte((x | splat(0x04)) ^ splat(b'&'));
    let lt_gt = zero_byte((x | splat(0x02)) ^ splat(b'>'));
    (control_or_high | amp_quot | lt_gt) != 0
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

/// Whether any byte of `s` is one [`escape_into`] must look at closely. Values shorter than a
/// word (most are) by one table look-up per byte; longer ones eight bytes at a time
/// ([`word_needs_care`]; the last word overlaps the one before it).
#[inline(never)]
fn needs_care(s: &[u8], attr: bool) -> bool {
    let n = s.len();
    if n < 8 {
        let mask = if attr { SPECIAL_ATTR } else { SPECIAL_TEXT };
        return s.iter().any(|&b| SPECIAL[usize::from(b)] & mask != 0);
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&s[at..at + 8]);
        word_needs_care(u64::from_le_bytes(b))
    };
    let mut at = 0;
    while at + 8 < n {
        if word(at) {
            return true;
        }
        at += 8;
    }
    word(n - 8)
}

/// The one escaping routine of every string the writer puts in a document (text and attribute
/// values), so that a conforming XML 1.0 parser reads back exactly `s`:
/// - `&`, `<`, `>` (and `"` in attributes) as entities;
/// - `\r` as `&#13;` everywhere (a parser turns a raw one into `\n`), and `\t`, `\n` in
///   attributes as `&#9;`, `&#10;` (attribute-value normalisation turns raw ones into spaces);
/// - code points XML 1.0's `Char` production excludes even as character references (C0 controls
///   other than tab, newline and carriage return; U+FFFE and U+FFFF; surrogates cannot occur in
///   a `str`) are refused: there is no way to write them.
#[inline]
fn escape_into(out: &mut String, s: &str, attr: bool) -> R {
    // Almost no value needs escaping: one pass finds out, then one copy.
    if needs_care(s.as_bytes(), attr) {
        return escape_slow(out, s, attr);
    }
    out.push_str(s);
    Ok(())
}

/// [`escape_into`] for a value that has a byte to look at: character by character.
#[cold]
#[inline(never)]
fn escape_slow(out: &mut String, s: &str, attr: bool) -> R {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn text(s: &super::super::Str) -> String {
        let mut out = String::new();
        write_str(&mut out, s, false).expect("text");
        out
    }

    fn attr(s: &super::super::Str) -> String {
        let mut out = String::new();
        write_str(&mut out, s, true).expect("attribute");
        out
    }

    /// A constant is never copied unescaped because it was written before in the other context:
    /// `"` is plain in text but not in an attribute, `<` and `&` in neither. Each order is tried
    /// twice, so the second round runs after any caching of the first.
    #[test]
    fn constants_are_escaped_in_both_contexts_whatever_was_written_before() {
        const QUOTE_TEXT_FIRST: &str = "a\"b";
        const QUOTE_ATTR_FIRST: &str = "c\"d";
        const LT_AMP_TEXT_FIRST: &str = "x<y&z";
        const LT_AMP_ATTR_FIRST: &str = "u<v&w";
        const LONG_QUOTE: &str = "a value longer than a word \"quoted\"";
        for _ in 0..2 {
            let q = Cow::Borrowed(QUOTE_TEXT_FIRST);
            assert_eq!(text(&q), "a\"b");
            assert_eq!(attr(&q), "a&quot;b");
            let q = Cow::Borrowed(QUOTE_ATTR_FIRST);
            assert_eq!(attr(&q), "c&quot;d");
            assert_eq!(text(&q), "c\"d");
            let l = Cow::Borrowed(LT_AMP_TEXT_FIRST);
            assert_eq!(text(&l), "x&lt;y&amp;z");
            assert_eq!(attr(&l), "x&lt;y&amp;z");
            let l = Cow::Borrowed(LT_AMP_ATTR_FIRST);
            assert_eq!(attr(&l), "u&lt;v&amp;w");
            assert_eq!(text(&l), "u&lt;v&amp;w");
            let long = Cow::Borrowed(LONG_QUOTE);
            assert_eq!(text(&long), LONG_QUOTE);
            assert_eq!(attr(&long), "a value longer than a word &quot;quoted&quot;");
        }
    }

    /// A plain constant is copied as it is, every time, in both contexts.
    #[test]
    fn plain_constants_are_copied_unchanged() {
        let v: super::super::Str = Cow::Borrowed("virtio-non-transitional");
        for _ in 0..3 {
            assert_eq!(text(&v), "virtio-non-transitional");
            assert_eq!(attr(&v), "virtio-non-transitional");
        }
    }
}
