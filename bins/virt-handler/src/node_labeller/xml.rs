//! The few XML documents the node labeller reads (libvirt's domain capabilities, host
//! capabilities and CPU baseline), as a plain element tree. KubeVirt decodes them with Go's
//! `encoding/xml` into structs that pick a handful of elements by path and ignore the rest; a
//! tree walked by path does the same without a serde model of libvirt's whole schema.

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

/// Why an XML document could not be read; `document` names which one.
#[derive(Debug, thiserror::Error)]
pub enum XmlError {
    /// Not well-formed XML.
    #[error("{document}: malformed XML at byte {position}: {reason}")]
    Malformed {
        /// Which file.
        document: &'static str,
        /// Where the reader stopped.
        position: u64,
        /// What quick-xml found wrong.
        reason: String,
    },
    /// Well-formed but without any element (e.g. an empty file).
    #[error("{document}: no root element")]
    NoRoot {
        /// Which file.
        document: &'static str,
    },
    /// An element or attribute KubeVirt decodes as an unsigned number holds something else.
    #[error("{document}: {path} is {value:?}, not an unsigned integer")]
    NotANumber {
        /// Which file.
        document: &'static str,
        /// The element or attribute, as a path from the root.
        path: String,
        /// What it holds.
        value: String,
    },
}

/// One element: its name, attributes in document order, its own character data (children's
/// text excluded, not trimmed: Go's `,chardata`) and its child elements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    /// Local name (no namespace prefix).
    pub name: String,
    /// Attributes (local names) with their unescaped values.
    pub attrs: Vec<(String, String)>,
    /// Own character data, unescaped, untrimmed.
    pub text: String,
    /// Child elements in document order.
    pub children: Vec<Element>,
}

impl Element {
    /// The value of attribute `name`, `""` when absent (what Go leaves in a string field).
    pub fn attr(&self, name: &str) -> &str {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// The child elements named `name`, in document order.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The elements at `path` below this one (`["features", "sev"]`: every `sev` child of every
    /// `features` child), in document order.
    pub fn at<'a>(&'a self, path: &[&'a str]) -> Vec<&'a Element> {
        let mut found = vec![self];
        for step in path {
            found = found.into_iter().flat_map(|e| e.all(step)).collect();
        }
        found
    }
}

/// Parses `text` into its root element. `document` names it in errors.
pub fn parse(document: &'static str, text: &str) -> Result<Element, XmlError> {
    let mut reader = Reader::from_str(text);
    let malformed = |reader: &Reader<&[u8]>, reason: String| XmlError::Malformed {
        document,
        position: reader.buffer_position(),
        reason,
    };
    let mut stack: Vec<Element> = Vec::new();
    let mut root = None;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| malformed(&reader, e.to_string()))?;
        match event {
            Event::Start(e) => stack.push(start(&e).map_err(|r| malformed(&reader, r))?),
            Event::Empty(e) => {
                let el = start(&e).map_err(|r| malformed(&reader, r))?;
                close(&mut stack, &mut root, el);
            }
            Event::End(_) => {
                let el = stack
                    .pop()
                    .ok_or_else(|| malformed(&reader, "end tag without a start".into()))?;
                close(&mut stack, &mut root, el);
            }
            Event::Text(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&t.xml10_content());
                }
            }
            Event::CData(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) => {
                let entity = format!("&{};", r.xml10_content());
                let s = quick_xml::escape::unescape(&entity)
                    .map_err(|e| malformed(&reader, e.to_string()))?;
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&s);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if let Some(open) = stack.last() {
        return Err(malformed(
            &reader,
            format!("element <{}> is not closed", open.name),
        ));
    }
    root.ok_or(XmlError::NoRoot { document })
}

/// Go's `encoding/xml` reading of an unsigned field: empty is 0, surrounding space is ignored,
/// anything else that is not a decimal number fails the whole document.
pub fn unsigned(document: &'static str, path: &str, value: &str) -> Result<u64, XmlError> {
    let v = value.trim();
    if value.is_empty() {
        return Ok(0);
    }
    v.parse().map_err(|_| XmlError::NotANumber {
        document,
        path: path.to_string(),
        value: value.to_string(),
    })
}

fn start(e: &BytesStart<'_>) -> Result<Element, String> {
    let mut el = Element {
        name: e.local_name().as_ref().to_string(),
        ..Element::default()
    };
    for a in e.attributes() {
        let a = a.map_err(|e| e.to_string())?;
        let value = a
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|e| e.to_string())?
            .into_owned();
        el.attrs
            .push((a.key.local_name().as_ref().to_string(), value));
    }
    Ok(el)
}

fn close(stack: &mut [Element], root: &mut Option<Element>, el: Element) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(el),
        None => {
            if root.is_none() {
                *root = Some(el);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_attributes_and_paths_are_read_as_go_reads_them() {
        let root = parse(
            "t",
            "<a x='1'><b>one &amp; <![CDATA[two]]><c/> three</b><b/><d><b y='z'/></d></a>",
        )
        .unwrap();
        assert_eq!(root.attr("x"), "1");
        assert_eq!(root.attr("missing"), "");
        assert_eq!(root.all("b").next().unwrap().text, "one & two three");
        assert_eq!(root.at(&["d", "b"])[0].attr("y"), "z");
        assert_eq!(root.at(&["b"]).len(), 2);
    }

    #[test]
    fn bad_documents_are_typed_errors_naming_the_document() {
        for bad in ["<a><b></a>", "<a>", "<a x='1' x='2'/>", "<a>&nope;</a>"] {
            let e = parse("doc.xml", bad).unwrap_err();
            assert!(
                matches!(
                    e,
                    XmlError::Malformed {
                        document: "doc.xml",
                        ..
                    }
                ),
                "{bad}: {e}"
            );
        }
        assert!(matches!(
            parse("doc.xml", "  "),
            Err(XmlError::NoRoot { .. })
        ));
        assert_eq!(unsigned("d", "p", "").unwrap(), 0);
        assert_eq!(unsigned("d", "p", " 7 ").unwrap(), 7);
        let e = unsigned("d", "features/sev/maxESGuests", "-1").unwrap_err();
        assert!(e.to_string().contains("features/sev/maxESGuests"), "{e}");
    }
}
