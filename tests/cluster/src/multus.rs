//! Multus as the real node's CNI ([`RealNode::start_with_multus`](crate::RealNode::start_with_multus)),
//! so a launcher pod gets KubeVirt's secondary networks: Multus's thin plugin (built from its Go
//! module by `scripts/multus.sh`) is the node's first CNI configuration (`cni/net.d/00-multus.conf`,
//! containerd loads the first file of the directory), delegates every pod's `eth0` to the node's
//! own bridge network (the cluster default network) and adds the
//! NetworkAttachmentDefinitions named in the pod's `k8s.v1.cni.cncf.io/networks` annotation,
//! reading them through the node's kubeconfig and writing `k8s.v1.cni.cncf.io/network-status`.
//! The NetworkAttachmentDefinition CRD is the one the
//! `network-attachment-definition-client` module ships (`artifacts/networks-crd.yaml`), read in
//! place from the Go module cache.
//!
//! Why the multus configuration looks like this:
//! - The default network it delegates to is the node conflist's first plugin (`bridge` with
//!   `host-local`) as a single-plugin configuration of the same name ([`DEFAULT_DELEGATE`]),
//!   not the conflist itself: Multus v4.2.2 runs a conflist delegate's DEL with the plugins
//!   re-encoded through its own types, which drops the IPAM settings, and `host-local` then
//!   refuses every pod deletion with "no IP ranges specified" (seen on this node; Multus issues
//!   #755 and #1449). A single configuration is passed on as its bytes. So pods of a Multus
//!   node have no `portmap` (no host ports), which no pod of these tests asks for.
//! - `name` is the node's CNI network name, so libcni's cached results in `/var/lib/cni/results`
//!   (named after the network) are found by the node's leftover check as without Multus.
//! - `cniDir` (Multus's own cache of each pod's delegates, which its DEL needs once the pod is
//!   gone from the API) lives under the node's directory instead of `/var/lib/cni/multus`, so it
//!   goes with the node.
//! - `binDir` is the node's CNI plugin directory (bridge, host-local, portmap): Multus runs the
//!   delegates itself; the multus binary's own directory is added to containerd's `bin_dirs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::ClusterError;
use crate::node_layout::Layout;

/// The CRD's name, as `kubectl wait` addresses it.
pub const NAD_CRD: &str = "network-attachment-definitions.k8s.cni.cncf.io";
/// The file name of Multus's configuration in the node's `cni/net.d`.
pub const MULTUS_CONF: &str = "00-multus.conf";

/// The default network's configuration, under the node's `cni/` (outside `net.d`: containerd
/// must not load it itself).
pub const DEFAULT_DELEGATE: &str = "cni/multus-default.conf";

/// What `scripts/multus.sh` provides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multus {
    /// The thin plugin's binary (`multus`), alone in its directory.
    pub binary: PathBuf,
    /// `artifacts/networks-crd.yaml` of the NetworkAttachmentDefinition client module.
    pub crd: PathBuf,
}

impl Multus {
    /// The directory containerd must search for the `multus` plugin.
    pub fn bin_dir(&self) -> &Path {
        self.binary.parent().unwrap_or(Path::new("/"))
    }
}

/// Runs `scripts/multus.sh` (which builds Multus on first use; once per test process) and
/// returns its binary and the CRD's path.
pub fn locate_multus() -> Result<Multus, ClusterError> {
    static BUILT: std::sync::OnceLock<Result<Multus, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = crate::workspace_root().ok_or("no workspace root with scripts/multus.sh")?;
            let script = root.join("scripts/multus.sh");
            let out = Command::new("bash")
                .arg(&script)
                .current_dir(&root)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("running {}: {e}", script.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                return Err(format!(
                    "{} failed ({}); see its messages above. stdout: {stdout}",
                    script.display(),
                    out.status
                ));
            }
            parse_script_output(&stdout)
        })
        .clone()
        .map_err(ClusterError::Binaries)
}

/// `crd=<path>` then the binary's path as the last line; both must exist.
fn parse_script_output(stdout: &str) -> Result<Multus, String> {
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    let binary = lines
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .ok_or("scripts/multus.sh printed no binary path")?;
    let crd = lines
        .iter()
        .find_map(|l| l.strip_prefix("crd="))
        .map(|l| PathBuf::from(l.trim()))
        .ok_or("scripts/multus.sh printed no crd= line")?;
    for (what, path) in [
        ("multus binary", &binary),
        ("NetworkAttachmentDefinition CRD", &crd),
    ] {
        if !path.is_file() {
            return Err(format!("the {what} {} does not exist", path.display()));
        }
    }
    Ok(Multus { binary, crd })
}

/// The single-plugin default network: the first plugin of the node's `conflist`, with its
/// version and name.
pub(crate) fn default_delegate(conflist: &serde_json::Value) -> serde_json::Value {
    let mut conf = conflist["plugins"][0].clone();
    conf["cniVersion"] = conflist["cniVersion"].clone();
    conf["name"] = conflist["name"].clone();
    conf
}

/// Multus's configuration for the node of `layout`, whose CNI plugins are in `cni_bin`.
pub(crate) fn multus_conf(layout: &Layout, cni_bin: &Path) -> serde_json::Value {
    let dir = layout.dir;
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": layout.cni_network,
        "type": "multus",
        "kubeconfig": layout.config_dir().join("kubeconfig"),
        "clusterNetwork": format!("{dir}/{DEFAULT_DELEGATE}"),
        "binDir": cni_bin,
        "cniDir": format!("{dir}/cni/multus"),
        "confDir": format!("{dir}/cni/net.d"),
        "logFile": layout.logs_dir().join("multus.log"),
        "logLevel": "verbose",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conf_delegates_to_the_nodes_own_conflist() {
        let layout = crate::node_layout::FIRST;
        let conf = multus_conf(&layout, Path::new("/x/cni"));
        assert_eq!(conf["type"], "multus");
        assert_eq!(conf["name"], layout.cni_network);
        assert_eq!(
            conf["clusterNetwork"],
            format!("{}/{DEFAULT_DELEGATE}", layout.dir)
        );
        assert_eq!(conf["binDir"], "/x/cni");
        assert!(
            conf["cniDir"]
                .as_str()
                .is_some_and(|d| d.starts_with(layout.dir)),
            "Multus's cache stays under the node's directory: {conf}"
        );
    }

    #[test]
    fn the_default_delegate_is_the_conflists_first_plugin_with_its_ipam() {
        let conflist = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "kvrs-pods",
            "plugins": [
                {"type": "bridge", "bridge": "b0", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.0.0.0/24"}]]}},
                {"type": "portmap"},
            ],
        });
        let conf = default_delegate(&conflist);
        assert_eq!(conf["type"], "bridge");
        assert_eq!(conf["name"], "kvrs-pods");
        assert_eq!(conf["cniVersion"], "1.0.0");
        assert_eq!(conf["ipam"], conflist["plugins"][0]["ipam"]);
        assert!(conf.get("plugins").is_none(), "{conf}");
    }

    #[test]
    fn the_script_output_names_both_files_or_is_refused() {
        let dir = std::env::temp_dir().join(format!("kvrs-multus-parse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (bin, crd) = (dir.join("multus"), dir.join("crd.yaml"));
        std::fs::write(&bin, "").unwrap();
        let out = format!("crd={}\n{}\n", crd.display(), bin.display());
        let err = parse_script_output(&out).unwrap_err();
        assert!(err.contains("CRD"), "{err}");
        std::fs::write(&crd, "").unwrap();
        let got = parse_script_output(&out).unwrap();
        assert_eq!(
            got,
            Multus {
                binary: bin.clone(),
                crd
            }
        );
        assert_eq!(got.bin_dir(), dir);
        assert!(parse_script_output(&format!("{}\n", bin.display())).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
