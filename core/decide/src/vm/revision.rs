//! ControllerRevisions as the VM decision reads them.
//!
//! A start revision records the VM spec a VMI was started from as JSON. Every VM sync of a
//! running VM reads it (is a restart required? may the VMI's generation annotation move?), and
//! parsing it anew each time was a tenth of the decision in a large simulation, with the whole
//! revision list copied out of the cache first. A [`Revision`] is shared with the cache that
//! holds it, and the spec it records is parsed at most once, by the first sync that asks.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::apps::v1::ControllerRevision;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::api::VirtualMachineSpec;

/// A shared ControllerRevision with its recorded VM spec parsed on first read. Cloning one
/// shares it (the parse included).
#[derive(Clone, Debug)]
pub struct Revision(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    object: Arc<ControllerRevision>,
    /// `data.spec` as a VM spec; `None` when absent or not one.
    vm_spec: OnceLock<Option<VirtualMachineSpec>>,
    /// The parsed spec's template serialised back to JSON (what the zero-value-insensitive
    /// comparison with the VM's template reads).
    template_json: OnceLock<Option<Value>>,
}

impl Revision {
    /// Wraps a revision shared with a cache (an informer's store hands out `Arc`s).
    pub fn new(object: Arc<ControllerRevision>) -> Self {
        Self(Arc::new(Shared {
            object,
            vm_spec: OnceLock::new(),
            template_json: OnceLock::new(),
        }))
    }

    /// The revision object.
    pub fn object(&self) -> &Arc<ControllerRevision> {
        &self.0.object
    }

    /// The VM spec a start revision records (`data.spec`), parsed on first read.
    pub fn vm_spec(&self) -> Option<&VirtualMachineSpec> {
        self.0
            .vm_spec
            .get_or_init(|| {
                // Deserialized from the borrowed JSON: no copy of the stored spec first.
                Deserialize::deserialize(self.0.object.data.as_ref()?.0.get("spec")?).ok()
            })
            .as_ref()
    }

    /// [`Revision::vm_spec`]'s template as JSON, serialised on first read.
    pub(crate) fn template_json(&self) -> Option<&Value> {
        self.0
            .template_json
            .get_or_init(|| serde_json::to_value(&self.vm_spec()?.template).ok())
            .as_ref()
    }
}

impl Deref for Revision {
    type Target = ControllerRevision;

    fn deref(&self) -> &ControllerRevision {
        &self.0.object
    }
}

impl From<ControllerRevision> for Revision {
    fn from(object: ControllerRevision) -> Self {
        Self::new(Arc::new(object))
    }
}

impl<'de> Deserialize<'de> for Revision {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ControllerRevision::deserialize(d).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn revision(data: Value) -> Revision {
        serde_json::from_value(json!({"metadata": {"name": "r"}, "data": data})).unwrap()
    }

    /// The spec is read from `data.spec`; a revision without one, or with one that is not a VM
    /// spec, has none rather than a default.
    #[test]
    fn the_recorded_spec_is_read_from_data_spec() {
        let r = revision(json!({"spec": {"runStrategy": "Always",
                                         "template": {"spec": {"domain": {"devices": {}}, "hostname": "h"}}}}));
        assert_eq!(
            r.vm_spec().and_then(|s| s.run_strategy.as_deref()),
            Some("Always")
        );
        // The template as its struct writes it: Go's zero values filled in.
        let template = r.template_json().unwrap();
        assert_eq!(template["spec"]["hostname"], "h");
        assert_eq!(template["metadata"], json!({}));
        assert!(revision(json!({})).vm_spec().is_none());
        assert!(revision(json!({"spec": 7})).vm_spec().is_none());
        assert!(revision(json!({"spec": 7})).template_json().is_none());
    }

    /// A clone shares the object and the parse: the second reader does not parse again.
    #[test]
    fn clones_share_one_parse() {
        let r = revision(json!({"spec": {"template": {}}}));
        let c = r.clone();
        let a = r.vm_spec().map(std::ptr::from_ref);
        let b = c.vm_spec().map(std::ptr::from_ref);
        assert!(a.is_some());
        assert_eq!(a, b);
        assert!(Arc::ptr_eq(r.object(), c.object()));
    }
}
