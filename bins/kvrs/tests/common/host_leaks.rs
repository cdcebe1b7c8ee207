//! What a launcher pod leaves on the host, read before and after a test's round and compared:
//! veths, mounts under the kubelet's directories, the pods' cgroups, the containers runc still
//! knows, the nftables ruleset. Shared by the fault campaigns (`faults.rs` on the cluster,
//! `run_killed.rs` on `kvrs run`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::lines::lines_of;

/// What a launcher pod leaves on the host, beyond the network namespaces and processes the
/// tests wait for themselves: compared before and after each round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostState {
    /// Host links of type veth.
    veths: BTreeSet<String>,
    /// Mount points under the kubelet's pod or state directories.
    mounts: BTreeSet<String>,
    /// Pod cgroups under the kubelet's cgroup root.
    cgroups: BTreeSet<String>,
    /// Containers runc still knows in the kubelet's state directory.
    runc_containers: BTreeSet<String>,
    /// The host's nftables ruleset, line by line (empty when `nft` is missing).
    nft_rules: BTreeSet<String>,
}

fn command_lines(cmd: &str, args: &[&str]) -> BTreeSet<String> {
    lines_of(std::process::Command::new(cmd).args(args))
}

fn entries(dir: &Path, dirs_only: bool) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !dirs_only || e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Where cgroup v2 is mounted (the unified hierarchy of a hybrid host too): the kubelet makes
/// its pods' cgroups there, and without it makes none.
fn cgroup2_mount() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()?
        .lines()
        .find_map(|l| {
            let mut f = l.split(' ');
            let (_, point, kind) = (f.next()?, f.next()?, f.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(point))
        })
}

impl HostState {
    /// The host now, for the kubelet of node `node` with its pods directory `pods_dir` and its
    /// state directory `kubelet_state` (runc's state is `<kubelet_state>/runc`).
    pub fn read(pods_dir: &Path, kubelet_state: &Path, node: &str) -> HostState {
        let roots = [
            pods_dir.to_string_lossy().into_owned(),
            kubelet_state.to_string_lossy().into_owned(),
        ];
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| roots.iter().any(|r| m.starts_with(r.as_str())))
            .map(str::to_string)
            .collect();
        HostState {
            veths: command_lines("ip", &["-o", "link", "show", "type", "veth"])
                .iter()
                .filter_map(|l| l.split(':').nth(1).map(|n| n.trim().to_string()))
                .collect(),
            mounts,
            cgroups: cgroup2_mount()
                .map(|root| entries(&root.join(format!("kvrs-kubelet-{node}")), true))
                .unwrap_or_default(),
            runc_containers: entries(&kubelet_state.join("runc"), true),
            nft_rules: command_lines("nft", &["list", "ruleset"]),
        }
    }

    /// What `self` has that `before` had not, named.
    pub fn added_since(&self, before: &HostState) -> Vec<String> {
        let mut added = Vec::new();
        for (what, now, then) in [
            ("veth", &self.veths, &before.veths),
            ("mount", &self.mounts, &before.mounts),
            ("cgroup", &self.cgroups, &before.cgroups),
            (
                "runc container",
                &self.runc_containers,
                &before.runc_containers,
            ),
            ("nftables line", &self.nft_rules, &before.nft_rules),
        ] {
            added.extend(now.difference(then).map(|x| format!("{what} {x}")));
        }
        added
    }

    /// [`added_since`](Self::added_since) of the host-wide parts kept only where they name
    /// one of `names` (pods' veths, addresses): on a machine where other tests run, a veth or
    /// an nftables rule of theirs is not this test's leak. Mounts, cgroups and runc containers
    /// are this kubelet's already.
    pub fn added_since_naming(&self, before: &HostState, names: &[String]) -> Vec<String> {
        self.added_since(before)
            .into_iter()
            .filter(|a| {
                let host_wide = a.starts_with("veth ") || a.starts_with("nftables line ");
                !host_wide || names.iter().any(|n| a.contains(n.as_str()))
            })
            .collect()
    }
}
