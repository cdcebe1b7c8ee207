//! What `kvrs run` prints while a VM starts and stops: KubeVirt's phases as the VMI passes
//! through them, with the time since the manifest was applied, the node, and the guest's
//! address once the guest agent or DHCP lease reports it, and the guest's OS once its QEMU
//! guest agent connects.
//!
//! Plain data in (each VMI as the API server last sent it, and the elapsed time), lines out: the
//! watch loop owns the clock and the printing, so these rules are tested without either.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// What was last printed for one VMI, so a line is printed only when something changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Seen {
    phase: String,
    node: String,
    address: String,
    guest_os: String,
    not_synchronized: String,
}

/// The lines still to print, VMI by VMI.
#[derive(Debug, Default)]
pub struct Progress {
    seen: BTreeMap<String, Seen>,
}

/// `12.34s` — seconds with two decimals, padded so the columns line up.
fn stamp(elapsed: Duration) -> String {
    format!("{:>7.2}s", elapsed.as_secs_f64())
}

/// The first IPv4 address the VMI reports on an interface (KubeVirt fills
/// `status.interfaces[].ipAddress` from the guest agent, or the pod IP for masquerade).
pub fn guest_address(vmi: &Value) -> Option<String> {
    vmi.pointer("/status/interfaces")?
        .as_array()?
        .iter()
        .filter_map(|i| i.get("ipAddress").and_then(Value::as_str))
        .find(|a| !a.is_empty())
        .map(str::to_string)
}

/// The guest OS the agent reports (`status.guestOSInfo`): its pretty name, else name.
pub fn guest_os(vmi: &Value) -> Option<String> {
    let os = vmi.pointer("/status/guestOSInfo")?;
    ["prettyName", "name"]
        .iter()
        .filter_map(|k| os.get(k).and_then(Value::as_str))
        .find(|s| !s.is_empty())
        .map(str::to_string)
}

/// `status.phase`, empty when the VMI has none yet.
pub fn phase(vmi: &Value) -> &str {
    vmi.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn key(vmi: &Value) -> String {
    let md = &vmi["metadata"];
    format!(
        "{}/{}",
        md["namespace"].as_str().unwrap_or("default"),
        md["name"].as_str().unwrap_or("")
    )
}

impl Progress {
    /// The lines `vmi` (as just received) adds after `elapsed`.
    pub fn observe(&mut self, vmi: &Value, elapsed: Duration) -> Vec<String> {
        let key = key(vmi);
        let now = Seen {
            phase: phase(vmi).to_string(),
            node: vmi
                .pointer("/status/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            address: guest_address(vmi).unwrap_or_default(),
            guest_os: guest_os(vmi).unwrap_or_default(),
            not_synchronized: not_synchronized(vmi).unwrap_or_default(),
        };
        let before = self.seen.entry(key.clone()).or_default();
        let mut lines = Vec::new();
        if now.phase != before.phase && !now.phase.is_empty() {
            let mut line = format!("{} {key} {}", stamp(elapsed), now.phase);
            if now.phase == "Scheduled" && !now.node.is_empty() {
                line.push_str(&format!(" on node {}", now.node));
            }
            // A VMI being deleted ends without its pod: the Ready condition's message then
            // says nothing about why it stopped.
            if now.phase == "Failed"
                && vmi.pointer("/metadata/deletionTimestamp").is_none()
                && let Some(why) = failure_reason(vmi)
            {
                line.push_str(&format!(": {why}"));
            }
            lines.push(line);
        }
        // An address or OS that goes missing for a moment (the agent answering before the
        // guest's DHCP) and comes back is not news.
        if now.address != before.address && !now.address.is_empty() {
            lines.push(format!(
                "{} {key} guest address {}",
                stamp(elapsed),
                now.address
            ));
            before.address = now.address;
        }
        if now.guest_os != before.guest_os && !now.guest_os.is_empty() {
            lines.push(format!(
                "{} {key} guest agent connected: {}",
                stamp(elapsed),
                now.guest_os
            ));
            before.guest_os = now.guest_os;
        }
        // Why the VMI is stuck before Running (a claim not found, a disk the launcher could not
        // make): KubeVirt says it in the Synchronized condition and nowhere else.
        if now.not_synchronized != before.not_synchronized && !now.not_synchronized.is_empty() {
            lines.push(format!(
                "{} {key} not synchronized: {}",
                stamp(elapsed),
                now.not_synchronized
            ));
        }
        before.not_synchronized = now.not_synchronized;
        before.phase = now.phase;
        before.node = now.node;
        lines
    }

    /// Whether a VMI has been reported and its removal not yet.
    pub fn watching(&self) -> bool {
        !self.seen.is_empty()
    }

    /// The line for a VMI that is gone from the API server.
    pub fn removed(&mut self, vmi: &Value, elapsed: Duration) -> String {
        let key = key(vmi);
        self.seen.remove(&key);
        format!("{} {key} deleted", stamp(elapsed))
    }
}

/// `reason: message` of a False `Synchronized` condition.
fn not_synchronized(vmi: &Value) -> Option<String> {
    vmi.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Synchronized" && c["status"] == "False")
        .map(|c| {
            format!(
                "{}: {}",
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            )
        })
}

/// The message of the first condition that says why the VMI failed, if any.
fn failure_reason(vmi: &Value) -> Option<String> {
    vmi.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .filter(|c| c["status"] == "False" || c["type"] == "Failure")
        .find_map(|c| c["message"].as_str().filter(|m| !m.is_empty()))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(phase: &str, status_extra: Value) -> Value {
        let mut status = json!({"phase": phase});
        if let (Some(s), Some(extra)) = (status.as_object_mut(), status_extra.as_object()) {
            s.extend(extra.clone());
        }
        json!({"metadata": {"name": "guest", "namespace": "default"}, "status": status})
    }

    #[test]
    fn prints_each_phase_once_with_its_time_and_the_node_when_scheduled() {
        let mut p = Progress::default();
        let ms = Duration::from_millis;
        let mut out = Vec::new();
        out.extend(p.observe(
            &json!({"metadata": {"name": "guest", "namespace": "default"}}),
            ms(5),
        ));
        out.extend(p.observe(&vmi("Pending", json!({})), ms(10)));
        out.extend(p.observe(&vmi("Pending", json!({})), ms(20)));
        out.extend(p.observe(&vmi("Scheduling", json!({})), ms(120)));
        out.extend(p.observe(
            &vmi("Scheduled", json!({"nodeName": "kvrs-local"})),
            ms(900),
        ));
        out.extend(p.observe(
            &vmi("Running", json!({"nodeName": "kvrs-local", "interfaces": [{"name": "default", "ipAddress": "10.251.0.2"}]})),
            ms(2346),
        ));
        out.extend(p.observe(
            &vmi("Running", json!({"nodeName": "kvrs-local", "interfaces": [{"name": "default", "ipAddress": "10.251.0.2"}]})),
            ms(3000),
        ));
        assert_eq!(
            out,
            [
                "   0.01s default/guest Pending",
                "   0.12s default/guest Scheduling",
                "   0.90s default/guest Scheduled on node kvrs-local",
                "   2.35s default/guest Running",
                "   2.35s default/guest guest address 10.251.0.2",
            ]
        );
    }

    #[test]
    fn the_guest_agent_adds_the_os_once_and_a_flapping_address_prints_once() {
        let mut p = Progress::default();
        let s = Duration::from_secs;
        let with_ip = json!({"interfaces": [{"ipAddress": "10.251.0.2"}]});
        let agent_no_ip = json!({"interfaces": [{"interfaceName": "eth0"}],
            "guestOSInfo": {"name": "kvrs e2e guest", "prettyName": "kvrs e2e guest (busybox)"}});
        let agent_ip = json!({"interfaces": [{"ipAddress": "10.251.0.2", "interfaceName": "eth0"}],
            "guestOSInfo": {"name": "kvrs e2e guest", "prettyName": "kvrs e2e guest (busybox)"}});
        let mut out = p.observe(&vmi("Running", with_ip), s(2));
        out.extend(p.observe(&vmi("Running", agent_no_ip), s(3)));
        out.extend(p.observe(&vmi("Running", agent_ip), s(13)));
        assert_eq!(
            out,
            [
                "   2.00s default/guest Running",
                "   2.00s default/guest guest address 10.251.0.2",
                "   3.00s default/guest guest agent connected: kvrs e2e guest (busybox)",
            ]
        );
    }

    #[test]
    fn a_failed_vmi_says_why() {
        let mut p = Progress::default();
        let failed = vmi(
            "Failed",
            json!({"conditions": [{"type": "Ready", "status": "False", "message": "launcher exited"}]}),
        );
        assert_eq!(
            p.observe(&failed, Duration::from_secs(3)),
            ["   3.00s default/guest Failed: launcher exited"]
        );
    }

    /// A VMI stuck before its pod (a missing claim) says why once, and again only when the
    /// reason changes.
    #[test]
    fn a_vmi_not_synchronized_says_why_once() {
        let mut p = Progress::default();
        let stuck = vmi(
            "Pending",
            json!({"conditions": [{"type": "Synchronized", "status": "False",
                "reason": "FailedPvcNotFound",
                "message": "PVC default/x does not exist, waiting for it to appear"}]}),
        );
        assert_eq!(
            p.observe(&stuck, Duration::from_secs(1)),
            [
                "   1.00s default/guest Pending",
                "   1.00s default/guest not synchronized: FailedPvcNotFound: PVC default/x does not exist, waiting for it to appear"
            ]
        );
        assert!(p.observe(&stuck, Duration::from_secs(2)).is_empty());
    }

    #[test]
    fn a_vmi_failed_while_being_deleted_gives_no_pod_reason() {
        let mut p = Progress::default();
        let mut failed = vmi(
            "Failed",
            json!({"conditions": [{"type": "Ready", "status": "False", "message": "virt-launcher pod is terminating"}]}),
        );
        failed["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
        assert_eq!(
            p.observe(&failed, Duration::from_secs(3)),
            ["   3.00s default/guest Failed"]
        );
    }

    #[test]
    fn a_deleted_vmi_starts_afresh() {
        let mut p = Progress::default();
        let running = vmi("Running", json!({}));
        p.observe(&running, Duration::from_secs(1));
        assert_eq!(
            p.removed(&running, Duration::from_secs(2)),
            "   2.00s default/guest deleted"
        );
        assert_eq!(
            p.observe(&running, Duration::from_secs(3)),
            ["   3.00s default/guest Running"]
        );
    }
}
