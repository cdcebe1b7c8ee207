//! Planning a `managedTap` binding plugin's interface (a plugin the KubeVirt CR registers with
//! `domainAttachmentType: managedTap`), as KubeVirt v1.9.0's virt-handler makes its pod side:
//! the bridge binding's links — bridge `k6t-<iface>`, the pod link renamed `<iface>-nic` on it,
//! the tap, the dummy holding the pod's MAC, MTU and addresses, `arp_ignore=1` when the pod has
//! a global IPv4 address — with two differences: the bridge has no address at all (no
//! link-local placeholder) and there is no DHCP cache, as the launcher serves no DHCP for a
//! plugin's tap (the plugin gives the guest its address by its own means).

use super::bridge::{BridgedPod, push_bridged_links};
use super::facts::PodFacts;
use super::plan::{NetPlan, PlanContext};
use super::spec::WiredIface;
use crate::error::NodeError;

pub(crate) fn plan_iface(
    ctx: &PlanContext<'_>,
    w: &WiredIface<'_>,
    facts: &PodFacts,
    plan: &mut NetPlan,
) -> Result<(), NodeError> {
    let pod = BridgedPod::find(w, facts)?;
    // The node serves this guest no address, so the setup names none.
    let setup = push_bridged_links(ctx, w, &pod, Vec::new(), plan);
    plan.interfaces.push(setup);
    Ok(())
}
