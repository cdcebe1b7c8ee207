//! The properties of a domain XML the converter wrote: XML 1.0 well-formed (every code point one
//! XML allows, every reference one that resolves to such a code point, tags balanced, read by
//! quick-xml to the end), attribute values that read back as written (no raw tab, newline or
//! carriage return, which a parser normalises to spaces), and no host path with a `..`
//! component.

use quick_xml::events::Event;
use quick_xml::{Reader, XmlVersion};

use crate::assert_no_parent_component;

/// Attributes that hold a host path on any element (`<source file=..>`, `<log file=..>`,
/// `<listen socket=..>`, `<nvram template=..>`, `<filesystem><source dir=..>`...).
const PATH_ATTRIBUTES: &[&str] = &["path", "file", "dir", "socket", "dev", "template"];
/// Elements whose text is a host path.
const PATH_ELEMENTS: &[&str] = &[
    "nvram", "loader", "kernel", "initrd", "dtb", "emulator", "source",
];

/// XML 1.0's `Char` production.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Panics unless `reference` (between `&` and `;`) is a predefined entity or a character
/// reference to an XML 1.0 character.
fn assert_reference(reference: &str, at: usize) {
    if matches!(reference, "amp" | "lt" | "gt" | "quot" | "apos") {
        return;
    }
    let code = if let Some(hex) = reference.strip_prefix("#x") {
        u32::from_str_radix(hex, 16).ok()
    } else if let Some(dec) = reference.strip_prefix('#') {
        dec.parse::<u32>().ok()
    } else {
        None
    };
    match code.and_then(char::from_u32) {
        Some(c) if is_xml_char(c) => {}
        _ => panic!(
            "malformed XML: reference &{reference}; at byte {at} is not an XML 1.0 character"
        ),
    }
}

/// Panics on each reference in a raw attribute value that is not an XML 1.0 one.
fn assert_references_in(raw: &str, at: usize) {
    let mut rest = raw;
    while let Some(amp) = rest.find('&') {
        let after = &rest[amp + 1..];
        let Some(semi) = after.find(';') else {
            panic!("malformed XML: unterminated reference in attribute value {raw:?} at byte {at}");
        };
        assert_reference(&after[..semi], at);
        rest = &after[semi + 1..];
    }
}

/// Checks every property of the module documentation on `xml`, panicking on the first broken
/// one with a message naming it.
pub fn assert_well_formed_domain(xml: &str) {
    if let Some((at, c)) = xml.char_indices().find(|(_, c)| !is_xml_char(*c)) {
        panic!(
            "malformed XML: code point U+{:04X} at byte {at} is not allowed in XML 1.0",
            c as u32
        );
    }
    let mut reader = Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let mut open: Vec<String> = Vec::new();
    let mut roots = 0usize;
    loop {
        let at = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        let event = match reader.read_event() {
            Ok(event) => event,
            Err(e) => panic!("malformed XML: quick-xml stops at byte {at}: {e}"),
        };
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let name = e.name().as_ref().to_string();
                if open.is_empty() {
                    roots += 1;
                }
                for attr in e.attributes().with_checks(true) {
                    let attr = match attr {
                        Ok(attr) => attr,
                        Err(err) => {
                            panic!("malformed XML: attribute of <{name}> at byte {at}: {err}")
                        }
                    };
                    let key = attr.key.as_ref().to_string();
                    let raw = attr.value.to_string();
                    if let Some(c) = raw.chars().find(|c| matches!(c, '\t' | '\n' | '\r')) {
                        panic!(
                            "attribute value changes when read back: <{name} {key}=..> at byte {at} holds a raw {c:?}"
                        );
                    }
                    assert_references_in(&raw, at);
                    let value = match attr.normalized_value(XmlVersion::Implicit1_0) {
                        Ok(v) => v.into_owned(),
                        Err(err) => panic!("malformed XML: <{name} {key}=..> at byte {at}: {err}"),
                    };
                    if PATH_ATTRIBUTES.contains(&key.as_str())
                        || (name == "source" && value.contains('/'))
                    {
                        assert_no_parent_component(&format!("<{name} {key}>"), &value);
                    }
                }
                if matches!(event, Event::Start(_)) {
                    open.push(name);
                }
            }
            Event::End(_) => {
                open.pop();
            }
            Event::Text(ref t) => {
                if let Some(parent) = open.last()
                    && PATH_ELEMENTS.contains(&parent.as_str())
                {
                    let text: &str = t.as_ref();
                    assert_no_parent_component(&format!("<{parent}> text"), text.trim());
                }
            }
            Event::GeneralRef(ref r) => {
                assert_reference(r.as_ref(), at);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !open.is_empty() {
        panic!("malformed XML: <{}> is never closed", open.join("> <"));
    }
    if roots != 1 {
        panic!("malformed XML: {roots} root elements");
    }
}
