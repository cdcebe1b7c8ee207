//! The DHCP configuration the handler leaves for the launcher of a bridge-bound interface.
//!
//! Wire fact: KubeVirt's launcher reads `/var/run/kubevirt-private/vif-cache-<podIface>.json`
//! (inside the pod) to serve the guest the pod's address it took away from the pod interface.
//! The file is KubeVirt's `cache.DHCPConfig` as Go's `encoding/json` writes it
//! (`MarshalIndent`, two spaces, mode 0604): field names as the Go fields (no tags);
//! `net.IP` as its text form (`""` when absent); `net.HardwareAddr` and `net.IPMask` as
//! base64 of the raw bytes (they are plain `[]byte` to Go's encoder); the embedded
//! `*net.IPNet` of a netlink address flattens into `IP` + `Mask`, and disappears when nil;
//! nil pointers and slices of other types are `null`. The types below spell that out, so a
//! KubeVirt launcher and kvrs's read the same file.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::net::IpAddr;

/// `cache.DHCPConfig`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DhcpConfig {
    /// Unused by the handler (empty).
    #[serde(rename = "Name", default)]
    pub name: String,
    /// The pod's IPv4 address, which the guest gets.
    #[serde(rename = "IP", default)]
    pub ip: NetlinkAddr,
    /// Unused for bridge binding (no DHCPv6).
    #[serde(rename = "IPv6", default)]
    pub ipv6: NetlinkAddr,
    /// The guest MAC (base64 of 6 bytes).
    #[serde(rename = "MAC", default, with = "b64_bytes")]
    pub mac: Option<Vec<u8>>,
    /// Unused by the handler.
    #[serde(rename = "AdvertisingIPAddr", default, with = "go_ip")]
    pub advertising_ip_addr: Option<IpAddr>,
    /// Unused by the handler.
    #[serde(rename = "AdvertisingIPv6Addr", default, with = "go_ip")]
    pub advertising_ipv6_addr: Option<IpAddr>,
    /// Routes to hand the guest besides the on-link one; `null` when there are none.
    #[serde(rename = "Routes", default)]
    pub routes: Option<Vec<NetlinkRoute>>,
    /// Not set by the handler (0); the launcher takes the MTU from the pod.
    #[serde(rename = "Mtu", default)]
    pub mtu: u16,
    /// True when the pod interface had no IPv4 address (no DHCP for the guest).
    #[serde(rename = "IPAMDisabled", default)]
    pub ipam_disabled: bool,
    /// The pod's IPv4 default gateway.
    #[serde(rename = "Gateway", default, with = "go_ip")]
    pub gateway: Option<IpAddr>,
    /// Unused by the handler.
    #[serde(rename = "Subdomain", default)]
    pub subdomain: String,
}

/// `net.IPNet`: an address (or network) and its mask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpNet {
    /// The address.
    #[serde(rename = "IP", with = "go_ip_required")]
    pub ip: IpAddr,
    /// The mask bytes (4 for IPv4, 16 for IPv6).
    #[serde(rename = "Mask", with = "b64_bytes_required")]
    pub mask: Vec<u8>,
}

impl IpNet {
    /// `ip` with a mask of `prefix_len` bits, as Go's `net.ParseCIDR` sizes it.
    pub fn new(ip: IpAddr, prefix_len: u8) -> Self {
        let len = if ip.is_ipv4() { 4 } else { 16 };
        let mut mask = vec![0u8; len];
        for (i, byte) in mask.iter_mut().enumerate() {
            let bits = (prefix_len as usize).saturating_sub(i * 8).min(8);
            *byte = if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
        }
        IpNet { ip, mask }
    }
}

/// vishvananda/netlink's `Addr`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetlinkAddr {
    /// The embedded `*net.IPNet` (absent from the JSON when nil).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub ipnet: Option<IpNet>,
    /// `Label`.
    #[serde(rename = "Label", default)]
    pub label: String,
    /// `Flags`.
    #[serde(rename = "Flags", default)]
    pub flags: i64,
    /// `Scope`.
    #[serde(rename = "Scope", default)]
    pub scope: i64,
    /// `Peer` (`null` when nil).
    #[serde(rename = "Peer", default)]
    pub peer: Option<IpNet>,
    /// `Broadcast`.
    #[serde(rename = "Broadcast", default, with = "go_ip")]
    pub broadcast: Option<IpAddr>,
    /// `PreferedLft` (sic).
    #[serde(rename = "PreferedLft", default)]
    pub prefered_lft: i64,
    /// `ValidLft`.
    #[serde(rename = "ValidLft", default)]
    pub valid_lft: i64,
    /// `LinkIndex`.
    #[serde(rename = "LinkIndex", default)]
    pub link_index: i64,
}

/// vishvananda/netlink's `Route`, of which the handler sets only `Dst` and `Gw`; every other
/// field is written with Go's zero value so the file reads as KubeVirt's does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[allow(missing_docs)]
pub struct NetlinkRoute {
    #[serde(default)]
    pub link_index: i64,
    #[serde(rename = "ILinkIndex", default)]
    pub ilink_index: i64,
    #[serde(default)]
    pub scope: i64,
    /// `Dst`: `null` for the default route.
    #[serde(default)]
    pub dst: Option<IpNet>,
    #[serde(default, with = "go_ip")]
    pub src: Option<IpAddr>,
    /// `Gw`: the next hop.
    #[serde(default, with = "go_ip")]
    pub gw: Option<IpAddr>,
    #[serde(default)]
    pub multi_path: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    pub protocol: i64,
    #[serde(default)]
    pub priority: i64,
    #[serde(default)]
    pub family: i64,
    #[serde(default)]
    pub table: i64,
    #[serde(default)]
    pub r#type: i64,
    #[serde(default)]
    pub tos: i64,
    #[serde(default)]
    pub flags: i64,
    #[serde(rename = "MPLSDst", default)]
    pub mpls_dst: Option<i64>,
    #[serde(default)]
    pub new_dst: Option<serde_json::Value>,
    #[serde(default)]
    pub encap: Option<serde_json::Value>,
    #[serde(default)]
    pub via: Option<serde_json::Value>,
    #[serde(default)]
    pub realm: i64,
    #[serde(rename = "MTU", default)]
    pub mtu: i64,
    #[serde(rename = "MTULock", default)]
    pub mtu_lock: bool,
    #[serde(default)]
    pub window: i64,
    #[serde(default)]
    pub rtt: i64,
    #[serde(default)]
    pub rtt_var: i64,
    #[serde(default)]
    pub ssthresh: i64,
    #[serde(default)]
    pub cwnd: i64,
    #[serde(rename = "AdvMSS", default)]
    pub adv_mss: i64,
    #[serde(default)]
    pub reordering: i64,
    #[serde(default)]
    pub hoplimit: i64,
    #[serde(default)]
    pub init_cwnd: i64,
    #[serde(default)]
    pub features: i64,
    #[serde(default)]
    pub rto_min: i64,
    #[serde(default)]
    pub rto_min_lock: bool,
    #[serde(default)]
    pub init_rwnd: i64,
    #[serde(rename = "QuickACK", default)]
    pub quick_ack: i64,
    #[serde(default)]
    pub congctl: String,
    #[serde(default)]
    pub fast_open_no_cookie: i64,
}

/// The cache file's name for a pod interface.
pub fn cache_file_name(pod_iface: &str) -> String {
    format!("vif-cache-{pod_iface}.json")
}

/// The file's bytes, as Go's `json.MarshalIndent(.., "", "  ")` writes them.
pub fn to_go_json(config: &DhcpConfig) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec_pretty(config)
}

/// `net.IP`: text form, `""` for nil.
mod go_ip {
    use super::*;
    pub fn serialize<S: Serializer>(v: &Option<IpAddr>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(ip) => s.collect_str(ip),
            None => s.serialize_str(""),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        match text.as_deref() {
            None | Some("") => Ok(None),
            Some(t) => t.parse().map(Some).map_err(serde::de::Error::custom),
        }
    }
}

/// `net.IP` that must be present.
mod go_ip_required {
    use super::*;
    pub fn serialize<S: Serializer>(v: &IpAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IpAddr, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// `[]byte`: base64, `null` for nil.
mod b64_bytes {
    use super::*;
    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_str(&STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| STANDARD.decode(t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// `[]byte` that must be present.
mod b64_bytes_required {
    use super::*;
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// The directory, relative to the pod root, where the launcher reads the cache (KubeVirt's
/// `VirtPrivateDir`).
pub const VIRT_PRIVATE_DIR: &str = "var/run/kubevirt-private";

/// Writes `vif-cache-<pod_iface>.json` under the pod root, as KubeVirt's cache does (directory
/// 0750 if it must be made, file 0604 owned by the launcher's user 107), without following a
/// symlink planted at the file.
/// Symlinks on the way (`/var/run` -> `/run`) are resolved inside the pod root.
pub fn write_cache_file(
    root: &std::path::Path,
    pod_iface: &str,
    config: &DhcpConfig,
) -> Result<std::path::PathBuf, crate::NodeError> {
    use crate::safepath::{Resolve, open_beneath};
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::{Mode, fchmod, mkdirat};
    use std::io::Write as _;

    let file_name = cache_file_name(pod_iface);
    let shown = root.join(VIRT_PRIVATE_DIR).join(&file_name);
    let fail = |reason: String| crate::NodeError::DhcpCache {
        path: shown.clone(),
        reason,
    };
    let (parent, leaf) = VIRT_PRIVATE_DIR
        .rsplit_once('/')
        .unwrap_or(("", VIRT_PRIVATE_DIR));
    let parent_fd = open_beneath(
        root,
        parent,
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        Resolve::InRoot,
    )
    .map_err(|r| fail(format!("/{parent}: {r}")))?;
    match mkdirat(&parent_fd, leaf, Mode::from_bits_truncate(0o750)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(fail(format!("creating /{VIRT_PRIVATE_DIR}: {}", e.desc()))),
    }
    let dir_fd = open_beneath(
        root,
        VIRT_PRIVATE_DIR,
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        Resolve::InRoot,
    )
    .map_err(|r| fail(format!("/{VIRT_PRIVATE_DIR}: {r}")))?;
    let fd = openat(
        &dir_fd,
        file_name.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o604),
    )
    .map_err(|e| fail(format!("open: {}", e.desc())))?;
    // The umask may have narrowed the create mode.
    fchmod(&fd, Mode::from_bits_truncate(0o604))
        .map_err(|e| fail(format!("chmod: {}", e.desc())))?;
    // Handed to the launcher's user, as KubeVirt's cache does (`UnsafeSetFileOwnership`): the
    // directory is the pod's `private` emptyDir, which the pod's fsGroup 107 makes setgid, so
    // the file is created with group 107, and for the launcher (107:107) the mode's empty group
    // bits would then deny the read that "others" allow.
    let qemu = Some(nix::unistd::Uid::from_raw(crate::devices::QEMU_UID));
    let qemu_group = Some(nix::unistd::Gid::from_raw(crate::devices::QEMU_UID));
    nix::unistd::fchown(&fd, qemu, qemu_group)
        .map_err(|e| fail(format!("chown to the launcher's user: {}", e.desc())))?;
    let bytes = to_go_json(config).map_err(|e| fail(format!("encoding: {e}")))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&bytes)
        .map_err(|e| fail(format!("write: {e}")))?;
    Ok(shown)
}

/// Reads a cache file back (for tests and for the launcher side).
pub fn read_cache_file(
    root: &std::path::Path,
    pod_iface: &str,
) -> Result<DhcpConfig, crate::NodeError> {
    let path = root.join(VIRT_PRIVATE_DIR).join(cache_file_name(pod_iface));
    let bytes = std::fs::read(&path).map_err(|e| crate::NodeError::DhcpCache {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| crate::NodeError::DhcpCache {
        path,
        reason: format!("decoding: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_sized_like_go() {
        assert_eq!(
            IpNet::new("10.0.0.1".parse().unwrap(), 24).mask,
            vec![255, 255, 255, 0]
        );
        assert_eq!(IpNet::new("10.0.0.1".parse().unwrap(), 0).mask, vec![0; 4]);
        assert_eq!(
            IpNet::new("10.0.0.1".parse().unwrap(), 20).mask,
            vec![255, 255, 240, 0]
        );
        assert_eq!(IpNet::new("fd00::1".parse().unwrap(), 64).mask.len(), 16);
    }

    #[test]
    fn go_json_shape_round_trips() {
        let config = DhcpConfig {
            ip: NetlinkAddr {
                ipnet: Some(IpNet::new("10.244.1.7".parse().unwrap(), 24)),
                ..Default::default()
            },
            mac: Some(vec![0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x07]),
            gateway: Some("10.244.1.1".parse().unwrap()),
            routes: Some(vec![NetlinkRoute {
                gw: Some("10.244.1.1".parse().unwrap()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let bytes = to_go_json(&config).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        insta::assert_snapshot!(text);
        let back: DhcpConfig = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, config);
    }
}
