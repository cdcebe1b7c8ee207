//! VMI or VM text (YAML or JSON) -> admission -> converter -> domain XML, as `kvrs convert`
//! does it. Asserts: no panic or abort; the XML is well-formed XML 1.0, read back by quick-xml to
//! the end, attribute values survive the round trip, no host path in it has a `..` component;
//! and the XML parses back into the converter's `Domain`.
#![no_main]

use std::sync::OnceLock;

use kvrs_admission::ClusterConfig;
use kvrs_converter::{Arch, AttachedElsewhere, ConverterContext, check_rendered_interfaces};
use libfuzzer_sys::fuzz_target;

fn config() -> &'static ClusterConfig {
    static CONFIG: OnceLock<ClusterConfig> = OnceLock::new();
    CONFIG.get_or_init(kvrs_fuzz::fuzz_config)
}

fuzz_target!(|data: &[u8]| {
    for vmi in kvrs_fuzz::admitted_vmis(data, config()) {
        // `kvrs convert`'s context: the oracle's, on a node of the VMI's architecture.
        let mut ctx = ConverterContext::default();
        if let Some(arch) = vmi.spec.architecture.as_deref().and_then(Arch::parse) {
            ctx.architecture = arch;
        }
        match check_rendered_interfaces(&vmi, &ctx) {
            Ok(()) => {}
            Err(e) if e.kind == AttachedElsewhere::Sriov => {}
            Err(_) => continue,
        }
        let Ok(domain) = kvrs_converter::convert(&vmi, &ctx) else {
            continue;
        };
        let Ok(xml) = domain.to_xml() else {
            continue;
        };
        kvrs_fuzz::xml::assert_well_formed_domain(&xml);
        if let Err(e) = kvrs_converter::Domain::from_xml(&xml) {
            panic!("domain XML does not parse back into Domain: {e}");
        }
    }
});
