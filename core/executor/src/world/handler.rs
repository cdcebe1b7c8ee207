//! virt-handler's world: the VMI and domain of a key, and the node facts gathered for them.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use kvrs_api::VirtualMachineInstance;
use kvrs_decide::Now;
use kvrs_decide::handler::facts::{GuestInfo, LauncherFacts, PodInterface};
use kvrs_decide::handler::retry::RetryState;
use kvrs_decide::handler::{Domain, HandlerConfig, HandlerWorld, NodeFacts, format_time};

/// A VMI as a handler's sources hand it out: usually shared with the cache rather than copied.
pub trait VmiRef {
    /// The VMI; `None` when the cached object is not one that can be read (it then counts as
    /// absent).
    fn vmi(&self) -> Option<&VirtualMachineInstance>;
}

impl VmiRef for Arc<VirtualMachineInstance> {
    fn vmi(&self) -> Option<&VirtualMachineInstance> {
        Some(self)
    }
}

impl VmiRef for VirtualMachineInstance {
    fn vmi(&self) -> Option<&VirtualMachineInstance> {
        Some(self)
    }
}

/// What one virt-handler knows about a key, as [`handler_inputs`] reads it: its node's VMI cache,
/// the domains its launchers reported, the launchers, and its own bookkeeping. The cluster binary
/// implements it over its reflector store, domain cache and launcher clients; the simulator over
/// its handler cache and fake node.
///
/// The `async` methods are the ones the cluster binary answers over a socket or the API server;
/// an in-memory implementation never awaits (drive [`handler_inputs`] with
/// [`run_ready`](crate::ready::run_ready)).
pub trait HandlerSources {
    /// How the sources hand out a VMI.
    type Vmi: VmiRef;

    /// The VMI of `key` in this node's VMI cache (the VMIs labelled with this node's name).
    fn vmi(&self, key: &str) -> Option<Self::Vmi>;

    /// The domain of `key`, as this node's launchers reported it.
    fn domain(&self, key: &str) -> Option<Domain>;

    /// The VMI of `key` read from the cluster rather than the node cache: asked when the node
    /// cache has none but a domain is left (a VMI that left the node's label selector, moved or
    /// relabelled, is not a deleted one).
    fn vmi_outside_node(&mut self, key: &str) -> impl Future<Output = Option<Self::Vmi>>;

    /// Reaches the launcher of the VMI with `uid` (`vmi` while it is stored) and says what the
    /// decision is told about it; `now` (RFC 3339) starts a wait for a socket not there yet. An
    /// implementation keeps what it reached for the sync's launcher commands.
    fn launcher(
        &mut self,
        uid: &str,
        vmi: Option<&VirtualMachineInstance>,
        now: &str,
    ) -> impl Future<Output = LauncherFacts>;

    /// The launcher of a stale domain: the domain's UID differs from the VMI's.
    fn old_launcher(&mut self, uid: &str, now: &str) -> impl Future<Output = LauncherFacts>;

    /// `domain`'s launcher stopped answering (or its pod is gone), and [`handler_inputs`] marked
    /// the domain deleted, as KubeVirt's domain informer reports such a domain; an
    /// implementation whose domains come from the launchers' notifications keeps the mark.
    fn domain_lost(&mut self, domain: &Domain);

    /// The pod interface cache network setup wrote for the VMI with `uid`.
    fn pod_interface_cache(&self, uid: &str) -> BTreeMap<String, PodInterface>;

    /// What the guest agent reports through the launcher reached by [`Self::launcher`]; asked
    /// only while the domain says the agent is connected (the decision then reads its version
    /// and commands). `None` when it cannot be asked or does not answer.
    fn guest_info(&mut self, key: &str) -> impl Future<Output = Option<GuestInfo>>;

    /// Whether the handler's own last status write of `key` has come back (or was waited for
    /// long enough); `vmi` is the VMI the sync reads.
    fn expectations_satisfied(&self, key: &str, vmi: Option<&VirtualMachineInstance>) -> bool;

    /// The IO-error retry state the previous sync of the VMI with `uid` left.
    fn io_error_retry(&self, uid: &str) -> Option<RetryState>;
}

/// The VMI and domain one handler sync is about, and the UIDs they give.
#[derive(Clone, Debug)]
pub struct HandlerSubject<V> {
    /// The queue key, `namespace/name`.
    pub key: String,
    /// The VMI: the node cache's, else (with a domain left) the cluster's.
    pub vmi: Option<V>,
    /// The domain the launchers reported (marked deleted when its launcher is gone).
    pub domain: Option<Domain>,
    /// The UID the sync's launcher commands are for: the VMI's, else the domain's.
    pub uid: String,
    /// The domain's UID (empty without a domain).
    pub domain_uid: String,
}

impl<V: VmiRef> HandlerSubject<V> {
    /// The VMI, when there is a readable one.
    pub fn vmi(&self) -> Option<&VirtualMachineInstance> {
        self.vmi.as_ref().and_then(VmiRef::vmi)
    }

    /// The handler decision's world for this subject with `facts`, on `node`, at `now`.
    pub fn world<'a>(
        &'a self,
        node: &'a str,
        now: Now,
        facts: &'a NodeFacts,
        config: &'a HandlerConfig,
    ) -> HandlerWorld<'a> {
        HandlerWorld {
            node,
            key: &self.key,
            now,
            vmi: self.vmi(),
            domain: self.domain.as_ref(),
            facts,
            config,
        }
    }
}

/// Gathers what one handler sync of `key` decides from at `now`: the subject (VMI, domain, UIDs)
/// and the node facts as they stand before any step runs.
///
/// - The VMI is the node cache's; when it has none but a domain is left, the cluster's
///   ([`NodeFacts::vmi_in_global_store_only`]).
/// - The launcher is the one of the VMI's UID (the domain's when the VMI is gone); a domain of
///   another UID is stale and its own launcher is asked about too.
/// - A domain whose launcher no longer answers counts as deleted from now on.
/// - The guest agent is asked for its info while the domain says it is connected.
pub async fn handler_inputs<S>(
    src: &mut S,
    key: &str,
    now: Now,
) -> (HandlerSubject<S::Vmi>, NodeFacts)
where
    S: HandlerSources + ?Sized,
{
    let mut vmi = src.vmi(key);
    let mut domain = src.domain(key);
    let mut facts = NodeFacts::default();
    if vmi.is_none() && domain.is_some() {
        vmi = src.vmi_outside_node(key).await;
        facts.vmi_in_global_store_only = vmi.is_some();
    }
    let typed = vmi.as_ref().and_then(VmiRef::vmi);
    let vmi_uid = typed
        .and_then(|v| v.metadata.uid.as_deref())
        .unwrap_or_default();
    let domain_uid = domain
        .as_ref()
        .map(|d| d.uid().to_string())
        .unwrap_or_default();
    let uid = if vmi_uid.is_empty() {
        domain_uid.clone()
    } else {
        vmi_uid.to_string()
    };
    let now_text = format_time(now.timestamp());
    facts.launcher = src.launcher(&uid, typed, &now_text).await;
    if !domain_uid.is_empty() && domain_uid != uid {
        facts.old_launcher = src.old_launcher(&domain_uid, &now_text).await;
    }
    // A launcher that stopped answering (killed, or its pod gone) takes its domain with it, as
    // KubeVirt's domain informer reports such a domain deleted.
    if let Some(d) = domain.as_mut()
        && d.uid() == uid
        && (facts.launcher.unresponsive || facts.launcher.gone)
        && d.meta.deletion_timestamp.is_none()
    {
        d.meta.deletion_timestamp = Some(now_text);
        src.domain_lost(d);
    }
    facts.pod_interface_cache = src.pod_interface_cache(&uid);
    // With the agent connected the decision reads what the agent reports (its version and
    // commands decide AgentVersionNotSupported), so it is asked before deciding.
    if domain.as_ref().is_some_and(Domain::guest_agent_connected) {
        facts.guest_info = src.guest_info(key).await;
    }
    let typed = vmi.as_ref().and_then(VmiRef::vmi);
    facts.expectations_satisfied = Some(src.expectations_satisfied(key, typed));
    facts.io_error_retry = src.io_error_retry(&uid);
    let subject = HandlerSubject {
        key: key.to_string(),
        vmi,
        domain,
        uid,
        domain_uid,
    };
    (subject, facts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ready::run_ready;

    /// A node with at most one VMI and one domain; records what it was asked.
    #[derive(Default)]
    struct FakeNode {
        vmi: Option<VirtualMachineInstance>,
        outside: Option<VirtualMachineInstance>,
        domain: Option<Domain>,
        launcher: LauncherFacts,
        asked: Vec<String>,
    }

    impl HandlerSources for FakeNode {
        type Vmi = VirtualMachineInstance;
        async fn launcher(
            &mut self,
            uid: &str,
            vmi: Option<&VirtualMachineInstance>,
            now: &str,
        ) -> LauncherFacts {
            assert_eq!(now, "1970-01-01T00:00:00Z");
            let with = if vmi.is_some() {
                "with its VMI"
            } else {
                "alone"
            };
            self.asked.push(format!("launcher {uid} {with}"));
            self.launcher.clone()
        }
        fn vmi(&self, _: &str) -> Option<VirtualMachineInstance> {
            self.vmi.clone()
        }
        fn domain(&self, _: &str) -> Option<Domain> {
            self.domain.clone()
        }
        async fn vmi_outside_node(&mut self, _: &str) -> Option<VirtualMachineInstance> {
            self.asked.push("outside".into());
            self.outside.clone()
        }
        async fn old_launcher(&mut self, uid: &str, _: &str) -> LauncherFacts {
            self.asked.push(format!("old launcher {uid}"));
            LauncherFacts::default()
        }
        fn domain_lost(&mut self, d: &Domain) {
            self.asked.push(format!("lost {}", d.uid()));
        }
        fn pod_interface_cache(&self, _: &str) -> BTreeMap<String, PodInterface> {
            BTreeMap::new()
        }
        async fn guest_info(&mut self, _: &str) -> Option<GuestInfo> {
            None
        }
        fn expectations_satisfied(&self, _: &str, _: Option<&VirtualMachineInstance>) -> bool {
            true
        }
        fn io_error_retry(&self, _: &str) -> Option<RetryState> {
            None
        }
    }

    fn vmi(uid: &str) -> VirtualMachineInstance {
        let mut v = VirtualMachineInstance::default();
        v.metadata.uid = Some(uid.into());
        v
    }

    fn domain(uid: &str) -> Domain {
        let mut d = Domain::default();
        d.spec.metadata.kubevirt.uid = uid.into();
        d
    }

    #[test]
    fn a_stale_domains_launcher_is_asked_about_too() {
        let mut node = FakeNode {
            vmi: Some(vmi("new")),
            domain: Some(domain("old")),
            ..FakeNode::default()
        };
        let (subject, _) = run_ready(handler_inputs(&mut node, "ns/a", Now::from_unix(0))).unwrap();
        assert_eq!(
            (subject.uid.as_str(), subject.domain_uid.as_str()),
            ("new", "old")
        );
        assert_eq!(
            node.asked,
            ["launcher new with its VMI", "old launcher old"]
        );
    }

    #[test]
    fn a_domain_left_without_a_vmi_is_looked_up_outside_the_node_and_lost_with_its_launcher() {
        let mut node = FakeNode {
            domain: Some(domain("u")),
            outside: Some(vmi("u")),
            launcher: LauncherFacts {
                gone: true,
                ..LauncherFacts::default()
            },
            ..FakeNode::default()
        };
        let (subject, facts) =
            run_ready(handler_inputs(&mut node, "ns/a", Now::from_unix(0))).unwrap();
        assert!(facts.vmi_in_global_store_only);
        assert!(subject.domain.as_ref().is_some_and(Domain::is_deleted));
        assert_eq!(node.asked, ["outside", "launcher u with its VMI", "lost u"]);
        let config = HandlerConfig::default();
        let world = subject.world("node", Now::from_unix(0), &facts, &config);
        assert_eq!(world.key, "ns/a");
        assert!(world.vmi.is_some());
    }
}
