//! Compare two XML documents as trees: element order, names, attributes (as a set) and trimmed text
//! matter; attribute order, indentation and `<a/>` versus `<a></a>` do not. The same rules as the
//! corpus's `xmldiff.py`, so tests can check conformance without Python.

use quick_xml::Reader;
use quick_xml::events::Event;
use std::collections::BTreeMap;

/// One element of a parsed document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Node {
    /// Qualified element name.
    pub name: String,
    /// Attributes by qualified name.
    pub attrs: BTreeMap<String, String>,
    /// Text content, trimmed.
    pub text: String,
    /// Child elements in document order.
    pub children: Vec<Node>,
}

/// Parses XML text into a tree of [`Node`]s.
pub(crate) fn parse(xml: &str) -> Result<Node, String> {
    let mut reader = Reader::from_str(xml);
    let mut stack: Vec<Node> = Vec::new();
    let mut root = None;
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(e) => stack.push(start_node(&e)?),
            Event::Empty(e) => {
                let n = start_node(&e)?;
                close(&mut stack, &mut root, n);
            }
            Event::End(_) => {
                let n = stack.pop().ok_or("unbalanced end tag")?;
                close(&mut stack, &mut root, n);
            }
            Event::Text(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) => {
                if let Some(top) = stack.last_mut() {
                    let name = r.xml10_content();
                    let entity = format!("&{name};");
                    let s = quick_xml::escape::unescape(&entity).map_err(|e| e.to_string())?;
                    top.text.push_str(&s);
                }
            }
            Event::CData(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&t.xml10_content());
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    let mut root = root.ok_or("no root element")?;
    trim(&mut root);
    Ok(root)
}

fn trim(n: &mut Node) {
    let t = n.text.trim();
    if t.len() != n.text.len() {
        n.text = t.to_string();
    }
    n.children.iter_mut().for_each(trim);
}

fn start_node(e: &quick_xml::events::BytesStart<'_>) -> Result<Node, String> {
    let mut n = Node {
        name: e.name().as_ref().to_string(),
        ..Node::default()
    };
    for a in e.attributes() {
        let a = a.map_err(|e| e.to_string())?;
        let key = a.key.as_ref().to_string();
        let value = a
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|e| e.to_string())?
            .into_owned();
        n.attrs.insert(key, value);
    }
    Ok(n)
}

fn close(stack: &mut [Node], root: &mut Option<Node>, n: Node) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(n),
        None => *root = Some(n),
    }
}

/// The differences between two documents (empty when they are the same tree), at most `limit`.
pub fn diff(expected: &str, actual: &str, limit: usize) -> Result<Vec<String>, String> {
    let a = parse(expected)?;
    let b = parse(actual)?;
    let mut out = Vec::new();
    compare(&a, &b, &format!("/{}", a.name), &mut out, limit);
    Ok(out)
}

fn compare(a: &Node, b: &Node, here: &str, out: &mut Vec<String>, limit: usize) {
    if out.len() >= limit {
        return;
    }
    if a.name != b.name {
        out.push(format!(
            "{here}: element <{}> expected, <{}> found",
            a.name, b.name
        ));
        return;
    }
    if a.attrs != b.attrs {
        let keys: std::collections::BTreeSet<&String> =
            a.attrs.keys().chain(b.attrs.keys()).collect();
        for k in keys {
            let (va, vb) = (a.attrs.get(k), b.attrs.get(k));
            if va != vb {
                out.push(format!("{here}/@{k}: expected {va:?}, found {vb:?}"));
            }
        }
    }
    if a.text != b.text {
        out.push(format!(
            "{here}: text expected {:?}, found {:?}",
            a.text, b.text
        ));
    }
    for i in 0..a.children.len().max(b.children.len()) {
        match (a.children.get(i), b.children.get(i)) {
            (Some(ca), Some(cb)) => {
                compare(ca, cb, &format!("{here}/{}[{i}]", ca.name), out, limit)
            }
            (Some(ca), None) => out.push(format!("{here}: missing <{}> at position {i}", ca.name)),
            (None, Some(cb)) => {
                out.push(format!("{here}: unexpected <{}> at position {i}", cb.name))
            }
            (None, None) => {}
        }
        if out.len() >= limit {
            return;
        }
    }
}
