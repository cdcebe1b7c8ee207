//! ControllerRevisions as the VM decision reads them.
//!
//! A start revision records the VM spec a VMI was started from as JSON. Every VM sync of a
//! running VM reads it (is a restart required? may the VMI's generation annotation move?), and
//! parsing it anew each time was a tenth of the decision in a large simulation, with the whole
//! revision list copied out of the cache first. A [`Revision`] is shared with the cache that
//! holds it, and the spec it records is parsed at most once, by the first sync that asks.

use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::apps::v1::ControllerRevision;
use serde::{Deserialize, Deserializer};

use crate::api::{VirtualMachineInstanceTemplateSpec, VirtualMachineSpec};
use crate::meta;

/// A shared ControllerRevision with its recorded VM spec parsed on first read. Cloning one
/// shares it (the parse included).
#[derive(Clone, Debug)]
pub struct Revision(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    object: Arc<ControllerRevision>,
    /// `data.spec` as a VM spec; `None` when absent or not one. Boxed, as the comparison
    /// below: inline, a revision nobody reads took ~10 KB of room for both.
    vm_spec: OnceLock<Option<Box<VirtualMachineSpec>>>,
    /// The last template compared with the recorded one and the answer: a VM whose template
    /// differs from its start revision's (its firmware UUID was written after the start, say)
    /// is compared again on every sync, and its template rarely changes in between.
    last_comparison: Mutex<Option<Box<(VirtualMachineInstanceTemplateSpec, bool)>>>,
}

impl Revision {
    /// Wraps a revision shared with a cache (an informer's store hands out `Arc`s).
    pub fn new(object: Arc<ControllerRevision>) -> Self {
        Self(Arc::new(Shared {
            object,
            vm_spec: OnceLock::new(),
            last_comparison: Mutex::new(None),
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
                Deserialize::deserialize(self.0.object.data.as_ref()?.0.get("spec")?)
                    .ok()
                    .map(Box::new)
            })
            .as_deref()
    }

    /// Whether `template` is the one this start revision recorded, as KubeVirt's semantic
    /// equality sees it: equal structs, or equal JSON once zero values are ignored. `false`
    /// for a revision that records no VM spec.
    pub(crate) fn records_template(&self, template: &VirtualMachineInstanceTemplateSpec) -> bool {
        let Some(spec) = self.vm_spec() else {
            return false;
        };
        // Equal typed templates serialize equally; only a typed difference needs the JSON check.
        if spec.template == *template {
            return true;
        }
        let mut last = self.0.last_comparison.lock().ok();
        if let Some(Some(seen)) = last.as_deref()
            && seen.0 == *template
        {
            return seen.1;
        }
        // Both sides serialised only when the answer is not remembered: keeping the recorded
        // side's JSON too cost more memory than the rare second serialisation.
        let json = |t: &VirtualMachineInstanceTemplateSpec| serde_json::to_value(t).ok();
        let same = match (json(&spec.template), json(template)) {
            (Some(recorded), Some(current)) => meta::eq_without_zero_values(&recorded, &current),
            _ => false,
        };
        if let Some(last) = last.as_deref_mut() {
            *last = Some(Box::new((template.clone(), same)));
        }
        same
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
    use serde_json::{Value, json};

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
        let template = r.vm_spec().and_then(|s| s.template.spec.as_ref());
        assert_eq!(template.and_then(|t| t.hostname.as_deref()), Some("h"));
        assert!(revision(json!({})).vm_spec().is_none());
        assert!(revision(json!({"spec": 7})).vm_spec().is_none());
        assert!(!revision(json!({"spec": 7})).records_template(&Default::default()));
    }

    /// The recorded template matches itself, a copy that differs only by a zero value, and no
    /// template that differs in substance — asked repeatedly, in any order.
    #[test]
    fn recorded_templates_compare_as_kubevirt_does() {
        let r = revision(json!({"spec": {"template": {"spec": {"domain": {"devices": {}}}}}}));
        let recorded = r.vm_spec().unwrap().template.clone();
        let mut zero = recorded.clone();
        zero.metadata.labels = Some(Default::default());
        let mut other = recorded.clone();
        other.spec.as_mut().unwrap().hostname = Some("h".into());
        for _ in 0..2 {
            assert!(r.records_template(&recorded));
            assert!(!r.records_template(&other));
            assert!(r.records_template(&zero));
            assert!(!r.records_template(&other));
        }
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
