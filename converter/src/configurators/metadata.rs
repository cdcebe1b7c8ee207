//! Domain name: `<namespace>_<name>`.

use super::Configurator;
use crate::domain::Domain;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Names the domain after the VMI.
pub(super) struct Metadata;

impl Configurator for Metadata {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let ns = vmi.metadata.namespace.as_deref().unwrap_or("");
        let name = vmi.metadata.name.as_deref().unwrap_or("");
        let mut s = String::with_capacity(ns.len() + 1 + name.len());
        s.push_str(ns);
        s.push('_');
        s.push_str(name);
        domain.name = s;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi, vmi_from};
    use serde_json::json;

    #[test]
    fn the_domain_is_named_namespace_underscore_name() {
        let d = run(&Metadata, &vmi(json!({"domain": {"devices": {}}}))).unwrap();
        assert_eq!(d.name, "demo_vm");
        let unnamed = vmi_from(json!({"metadata": {}, "spec": {"domain": {"devices": {}}}}));
        assert_eq!(run(&Metadata, &unnamed).unwrap().name, "_");
    }
}
