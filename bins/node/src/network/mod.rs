//! The pod network of a VMI, prepared from the node inside the pod's network namespace.
//!
//! Split as KubeVirt's `netpod` is, with the seams made explicit: [`discover`] reads the
//! namespace into [`PodFacts`], [`plan`] turns the VMI and the facts into a [`NetPlan`] (pure,
//! snapshot-tested), [`apply`] carries a plan out. [`setup_pod_network`] is the three in a row.

mod apply;
mod bridge;
pub mod cidr;
pub mod dhcp_cache;
pub mod facts;
mod managed_tap;
mod masquerade;
pub mod names;
mod netns;
pub mod nft;
pub mod plan;
mod rtnl;
pub mod spec;
pub mod tools;

pub use facts::{IfAddr, PodFacts, PodLink, Route4};
pub use masquerade::MASQUERADE_BRIDGE_MAC;
pub use netns::run_in_netns;
pub use plan::{InterfaceSetup, LinkKind, LinkSpec, MacSpec, NetPlan, Sysctl, TapSpec, plan};
pub use spec::{Binding, BindingPlugins};

use crate::error::NodeError;
use crate::pod::PodRef;
use kvrs_api::VirtualMachineInstance;

/// What [`setup_pod_network`] did, per VMI interface.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NetSetup {
    /// One entry per wired interface, in spec order.
    pub interfaces: Vec<InterfaceSetup>,
}

/// Discovers, plans and applies the pod network of `vmi` in `pod`, in a cluster whose network
/// binding plugins are `plugins` (a `managedTap` plugin's interfaces are wired here too).
///
/// Safe to run again on a pod already set up (a restarted handler): the second run finds the
/// links and the NAT in place and changes nothing. Needs `CAP_SYS_ADMIN` (setns) and
/// `CAP_NET_ADMIN` in the pod's namespace, and the `ip` and `nft` binaries on `PATH`.
pub fn setup_pod_network(
    pod: &PodRef,
    vmi: &VirtualMachineInstance,
    plugins: &BindingPlugins,
) -> Result<NetSetup, NodeError> {
    let key = vmi_key(vmi);
    let span = tracing::info_span!("pod_network", vmi = %key);
    let _guard = span.enter();
    let facts = discover(pod)?;
    let plan = plan(vmi, &facts, plugins)?;
    tracing::debug!(
        links = plan.links.len(),
        nat = plan.nft_script.is_some(),
        "planned"
    );
    apply(pod, &plan)?;
    for i in &plan.interfaces {
        tracing::info!(
            network = %i.network,
            binding = ?i.binding,
            pod_iface = %i.pod_iface,
            bridge = %i.bridge,
            tap = %i.tap,
            mtu = i.mtu,
            "pod network ready"
        );
    }
    Ok(NetSetup {
        interfaces: plan.interfaces,
    })
}

/// Reads the pod's links, addresses, IPv4 routes and NAT state.
pub fn discover(pod: &PodRef) -> Result<PodFacts, NodeError> {
    run_in_netns(&pod.netns, || {
        block_on(async {
            let rtnl = rtnl::Rtnl::connect()?;
            let links = rtnl.links().await?;
            let routes4 = rtnl.routes4().await?;
            let (v4, v6) = tools::nat_present()?;
            Ok(PodFacts {
                links,
                routes4,
                nat_present_v4: v4,
                nat_present_v6: v6,
            })
        })
    })
}

/// Carries out `plan` in `pod`: DHCP cache files first (under the pod root), then links,
/// sysctls and NAT in the pod's namespace.
pub fn apply(pod: &PodRef, plan: &NetPlan) -> Result<(), NodeError> {
    for c in &plan.dhcp_caches {
        let path = dhcp_cache::write_cache_file(&pod.root, &c.pod_iface, &c.config)?;
        tracing::debug!(path = %path.display(), "dhcp cache written");
    }
    let plan = plan.clone();
    run_in_netns(&pod.netns, move || {
        block_on(apply::apply_in_current_netns(&plan))
    })
}

/// Runs a future on a runtime of the current (namespace) thread.
fn block_on<T>(
    fut: impl std::future::Future<Output = Result<T, NodeError>>,
) -> Result<T, NodeError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| NodeError::netlink("-", "start runtime", e))?;
    rt.block_on(fut)
}

fn vmi_key(vmi: &VirtualMachineInstance) -> String {
    format!(
        "{}/{}",
        vmi.metadata.namespace.as_deref().unwrap_or(""),
        vmi.metadata.name.as_deref().unwrap_or("")
    )
}
