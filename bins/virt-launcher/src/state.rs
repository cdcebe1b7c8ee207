//! The domain as the handler sees it: Go `api.Domain` JSON built from libvirt's live XML and
//! state, with KubeVirt's translation of libvirt's state and reason codes.

use kvrs_converter::Domain;
use kvrs_converter::gojson::{
    DomainEnvelope, FsFreeze, GuestOsInfo, InterfaceStatus, LifeCycle, StateChangeReason,
    to_go_json_vec,
};

use crate::libvirt::{Connection, DomainRef, Libvirt, LibvirtError};

/// `virDomainState` -> `api.LifeCycle`.
pub fn life_cycle(state: i32) -> LifeCycle {
    match state {
        0 => LifeCycle::NoState,
        1 => LifeCycle::Running,
        2 => LifeCycle::Blocked,
        3 => LifeCycle::Paused,
        4 => LifeCycle::ShuttingDown,
        5 => LifeCycle::Shutoff,
        6 => LifeCycle::Crashed,
        7 => LifeCycle::PmSuspended,
        _ => LifeCycle::Unknown,
    }
}

/// `(virDomainState, reason)` -> `api.StateChangeReason`, as KubeVirt translates them.
pub fn reason(state: i32, reason: i32) -> StateChangeReason {
    use StateChangeReason as R;
    match (state, reason) {
        // shut down: user
        (4, 1) => R::User,
        // shut off
        (5, 1) => R::Shutdown,
        (5, 2) => R::Destroyed,
        (5, 3) => R::Crashed,
        (5, 4) => R::Migrated,
        (5, 5) => R::Saved,
        (5, 6) => R::Failed,
        (5, 7) => R::FromSnapshot,
        // crashed: panicked
        (6, 1) => R::Panicked,
        // paused
        (3, 1) => R::User,
        (3, 2) => R::Migration,
        (3, 3) => R::Save,
        (3, 4) => R::Dump,
        (3, 5) => R::IoError,
        (3, 6) => R::Watchdog,
        (3, 7) => R::FromSnapshot,
        (3, 8) => R::ShuttingDown,
        (3, 9) => R::Snapshot,
        (3, 11) => R::StartingUp,
        (3, 12) => R::Postcopy,
        (3, 13) => R::PostcopyFailed,
        _ => R::Unknown,
    }
}

/// Who the domain belongs to, and the KubeVirt metadata the launcher keeps for it.
#[derive(Debug, Clone, Default)]
pub struct Owner {
    /// VMI namespace.
    pub namespace: String,
    /// VMI name.
    pub name: String,
    /// VMI UID.
    pub uid: String,
    /// The grace period bookkeeping KubeVirt's launcher reports in the domain's
    /// `Spec.Metadata.KubeVirt.GracePeriod`: the VMI's grace period once synced, and when the
    /// first graceful shutdown was sent. virt-handler reads it to decide between another ACPI
    /// signal and a kill; without it every shutdown would be a kill.
    pub grace: Option<kvrs_converter::domain::GracePeriodMetadata>,
    /// The migration bookkeeping (`Spec.Metadata.KubeVirt.Migration`): the handler learns a
    /// migration's start, end, failure and abort from it.
    pub migration: Option<kvrs_converter::domain::MigrationMetadata>,
}

/// What the guest agent adds to the domain's status (`None`: the agent never said).
#[derive(Debug, Clone, Default)]
pub struct AgentStatus {
    /// `Status.OSInfo`.
    pub os_info: Option<GuestOsInfo>,
    /// `Status.Interfaces`.
    pub interfaces: Option<Vec<InterfaceStatus>>,
    /// `Status.FSFreezeStatus`.
    pub fs_freeze: Option<FsFreeze>,
}

/// The domain's `api.Domain` JSON from libvirt: live XML as the spec, state and reason, and the
/// guest agent's OS, interfaces and freeze state.
pub async fn domain_json(
    conn: &Connection,
    dom: &DomainRef,
    owner: &Owner,
    agent: AgentStatus,
) -> Result<Vec<u8>, LibvirtError> {
    // The XML first, the state last: the state is what the handler acts on, and a call queued
    // behind a running `create` would otherwise deliver the pre-start state after the start.
    let xml = conn.xml_desc(dom).await?;
    let (state, why) = conn.state(dom).await?;
    // libvirt's own XML always parses; if it ever does not, report the state with an empty spec
    // rather than nothing.
    let spec = Domain::from_xml(&xml).unwrap_or_default();
    let mut spec = spec;
    spec.metadata.kubevirt.uid = owner.uid.clone();
    if owner.grace.is_some() {
        spec.metadata.kubevirt.graceperiod = owner.grace.clone();
    }
    if owner.migration.is_some() {
        spec.metadata.kubevirt.migration = owner.migration.clone();
    }
    let mut env = DomainEnvelope::new(&owner.namespace, &owner.name, spec);
    env.meta.uid = owner.uid.clone();
    env.status.status = life_cycle(state);
    env.status.reason = reason(state, why);
    if let Some(os) = agent.os_info {
        env.status.os_info = os;
    }
    if let Some(ifaces) = agent.interfaces {
        env.status.interfaces = ifaces;
    }
    if let Some(f) = agent.fs_freeze {
        env.status.fs_freeze_status = f;
    }
    Ok(to_go_json_vec(&env))
}

/// The JSON of a domain that no longer exists: NoState / NonExistent with a deletion timestamp,
/// which is how KubeVirt's launcher tells the handler a domain is gone.
pub fn deleted_domain_json(owner: &Owner, now_rfc3339: String) -> Vec<u8> {
    let mut env = DomainEnvelope::new(&owner.namespace, &owner.name, Domain::default());
    env.meta.uid = owner.uid.clone();
    env.meta.deletion_timestamp = Some(now_rfc3339);
    env.status.status = LifeCycle::NoState;
    env.status.reason = StateChangeReason::NonExistent;
    to_go_json_vec(&env)
}

/// Seconds since the epoch as RFC 3339 UTC (no date crate needed for one timestamp).
pub fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

fn rfc3339(secs: u64) -> String {
    // u64 seconds / 86 400 always fits an i64.
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_reasons_translate_like_kubevirt() {
        assert_eq!(life_cycle(1), LifeCycle::Running);
        assert_eq!(life_cycle(5), LifeCycle::Shutoff);
        assert_eq!(reason(5, 2), StateChangeReason::Destroyed);
        assert_eq!(reason(5, 1), StateChangeReason::Shutdown);
        assert_eq!(reason(3, 1), StateChangeReason::User);
        assert_eq!(reason(1, 1), StateChangeReason::Unknown);
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn deleted_domain_says_non_existent() {
        let owner = Owner {
            namespace: "ns".into(),
            name: "vm".into(),
            uid: "u".into(),
            grace: None,
            migration: None,
        };
        let v: serde_json::Value =
            serde_json::from_slice(&deleted_domain_json(&owner, rfc3339(0))).unwrap();
        assert_eq!(v["Status"]["Reason"], "NonExistent");
        assert_eq!(v["ObjectMeta"]["name"], "vm");
    }
}
