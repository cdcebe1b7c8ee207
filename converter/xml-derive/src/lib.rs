//! `#[derive(XmlElement)]` for kvrs-converter's libvirt domain model.
//!
//! The model's serde attributes are its XML schema: `#[serde(rename = "@type")]` is an
//! attribute, `"$text"` the character data, any other field a child element named by its
//! (serialize) rename or field name, `skip_serializing_if` leaves a field out. serde's derive
//! reads them for parsing (quick-xml); this derive reads the same attributes and writes a direct
//! writer for each struct, so the element and attribute names exist once and writing needs no
//! serde round: every name, `<name`, `</name>` and ` name="` is a constant in the generated
//! code. The runtime half (the `Writer`, the value traits) is kvrs-converter's private
//! `domain::writer` module, which the generated code names as `crate::domain::writer`: the derive
//! serves kvrs-converter's own model and nothing else.
//!
//! Output rules (the same as the serde-based writer this replaces, byte for byte):
//! - attributes go into the start tag in field order, wherever they stand among the children;
//! - a struct with character data writes `<name attrs>text</name>`;
//! - a struct whose children all come out empty (or that has none) writes `<name attrs/>`;
//! - otherwise children follow, each on its own indented line, then `</name>` on its own line.

#![warn(unreachable_pub)]

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::ext::IdentExt;
use syn::{Data, DeriveInput, Error, Fields, LitStr, parse_macro_input};

/// Writes the struct as one XML element (kvrs-converter's `domain::writer::XmlElement`).
#[proc_macro_derive(XmlElement)]
pub fn derive_xml_element(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// What a field is in the XML.
enum Kind {
    /// `@name`: an attribute of the start tag.
    Attribute(String),
    /// `$text`: the element's character data.
    Text,
    /// A child element.
    Element(String),
}

/// One field with what its serde attributes say about writing it.
struct Field {
    ident: syn::Ident,
    kind: Kind,
    /// `skip_serializing_if`: the path of the predicate.
    skip_if: Option<syn::ExprPath>,
}

fn expand(input: &DeriveInput) -> Result<Tokens, Error> {
    let Data::Struct(data) = &input.data else {
        return Err(Error::new_spanned(
            &input.ident,
            "XmlElement is derived for structs only",
        ));
    };
    let fields = match &data.fields {
        Fields::Named(named) => named
            .named
            .iter()
            .map(field)
            .collect::<Result<Vec<_>, _>>()?,
        Fields::Unit => Vec::new(),
        Fields::Unnamed(_) => {
            return Err(Error::new_spanned(
                &input.ident,
                "XmlElement needs named fields",
            ));
        }
    };
    let texts = fields
        .iter()
        .filter(|f| matches!(f.kind, Kind::Text))
        .count();
    let has_children = fields.iter().any(|f| matches!(f.kind, Kind::Element(_)));
    if texts > 1 || (texts == 1 && has_children) {
        return Err(Error::new_spanned(
            &input.ident,
            "XmlElement: character data goes with attributes only (one `$text`, no children)",
        ));
    }

    let w = quote!(crate::domain::writer);
    let mut attributes = Vec::new();
    let mut body = Vec::new();
    for f in &fields {
        let ident = &f.ident;
        let write = match &f.kind {
            Kind::Attribute(name) => {
                // The closing quote of the attribute before goes out with this one's name
                // (`" name="`), and this one's with whatever follows: one copy per attribute
                // instead of two. `quoted` is a constant wherever the attributes before are
                // all required, so the branch folds away there.
                let prefix = format!(" {name}=\"");
                let quote_prefix = format!("\" {name}=\"");
                let at = format!("@{name}");
                let present = match &f.skip_if {
                    Some(skip) => quote! {
                        !#skip(&self.#ident) && #w::XmlAttr::present(&self.#ident)
                    },
                    None => quote! { #w::XmlAttr::present(&self.#ident) },
                };
                attributes.push(quote! {
                    if #present {
                        if quoted {
                            w.push(#quote_prefix);
                        } else {
                            w.push(#prefix);
                        }
                        #w::XmlAttr::write_value(&self.#ident, w)
                            .map_err(|e| e.within(#at))?;
                        quoted = true;
                    }
                });
                continue;
            }
            Kind::Text => quote! {
                #w::XmlText::write_text(&self.#ident, w)?;
            },
            Kind::Element(name) => {
                let open = format!("<{name}");
                let open_end = format!("<{name}>");
                let close = format!("</{name}>");
                quote! {{
                    struct Tag;
                    impl #w::TagName for Tag {
                        const OPEN: &'static str = #open;
                        const OPEN_END: &'static str = #open_end;
                        const CLOSE: &'static str = #close;
                    }
                    #w::XmlElement::write_element::<Tag>(&self.#ident, w)
                        .map_err(|e| e.within(#name))?;
                }}
            }
        };
        let write = match &f.skip_if {
            Some(skip) => quote! { if !#skip(&self.#ident) { #write } },
            None => write,
        };
        body.push(write);
    }
    let finish = if texts == 1 {
        quote! {
            if quoted {
                w.push("\">");
            } else {
                w.push(">");
            }
            #(#body)*
            w.end_text::<N>()
        }
    } else if has_children {
        quote! {
            let children = w.open_body(quoted);
            #(#body)*
            w.end_body::<N>(children)
        }
    } else {
        quote! { w.end_empty(quoted) }
    };

    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics #w::XmlElement for #name #ty_generics #where_clause {
            #[inline]
            fn write_element<N: #w::TagName>(
                &self,
                w: &mut #w::Writer,
            ) -> ::core::result::Result<(), #w::WriteError> {
                w.start::<N>();
                // Whether an attribute's closing quote is still to be written.
                #[allow(unused_mut)]
                let mut quoted = false;
                #(#attributes)*
                #finish
            }
        }
    })
}

/// Reads a field's `#[serde(...)]` attributes.
fn field(f: &syn::Field) -> Result<Field, Error> {
    let ident = f
        .ident
        .clone()
        .ok_or_else(|| Error::new_spanned(f, "XmlElement needs named fields"))?;
    let mut name = ident.unraw().to_string();
    let mut skip_if = None;
    for attr in f.attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                if meta.input.peek(syn::Token![=]) {
                    name = meta.value()?.parse::<LitStr>()?.value();
                } else {
                    meta.parse_nested_meta(|inner| {
                        let value = inner.value()?.parse::<LitStr>()?.value();
                        if inner.path.is_ident("serialize") {
                            name = value;
                        }
                        Ok(())
                    })?;
                }
            } else if meta.path.is_ident("skip_serializing_if") {
                skip_if = Some(meta.value()?.parse::<LitStr>()?.parse::<syn::ExprPath>()?);
            } else if meta.path.is_ident("default") {
                if meta.input.peek(syn::Token![=]) {
                    meta.value()?.parse::<LitStr>()?;
                }
            } else {
                return Err(meta
                    .error("XmlElement understands rename, skip_serializing_if and default only"));
            }
            Ok(())
        })?;
    }
    let kind = if let Some(attr) = name.strip_prefix('@') {
        Kind::Attribute(attr.to_string())
    } else if name == "$text" {
        Kind::Text
    } else {
        Kind::Element(name)
    };
    Ok(Field {
        ident,
        kind,
        skip_if,
    })
}
