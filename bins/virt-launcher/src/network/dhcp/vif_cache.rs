//! The bridge-binding lease the handler caches at
//! `/var/run/kubevirt-private/vif-cache-<pod interface>.json` before the launcher syncs.
//!
//! Wire fact: the file is KubeVirt's `cache.DHCPConfig` as Go's `encoding/json` writes it —
//! exported field names verbatim; `net.IP` as its text form (`""` when nil);
//! `net.HardwareAddr` and `net.IPMask` as base64 of the raw bytes (`null` when nil); the
//! `netlink.Addr` fields flattened with its embedded `*net.IPNet` (`IP` and `Mask` absent when
//! that pointer is nil); `Routes` a JSON array of `netlink.Route` objects (or `null`) whose
//! `Dst` is `{"IP": .., "Mask": ..}` or `null` (a default route). Only the fields a DHCPv4 lease
//! needs are read; the many others in `netlink.Route` are ignored.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use base64::Engine;
use serde::Deserialize;

use super::config::{DhcpConfig, Route};
use crate::network::error::NetworkError;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct GoDhcpConfig {
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "IP")]
    ip: GoAddr,
    #[serde(rename = "MAC")]
    mac: Option<String>,
    #[serde(rename = "Routes")]
    routes: Option<Vec<GoRoute>>,
    #[serde(rename = "Mtu")]
    mtu: u16,
    #[serde(rename = "IPAMDisabled")]
    ipam_disabled: bool,
    #[serde(rename = "Gateway")]
    gateway: String,
    #[serde(rename = "Subdomain")]
    subdomain: String,
}

/// `netlink.Addr`, of which only the embedded network matters here.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct GoAddr {
    #[serde(rename = "IP")]
    ip: Option<String>,
    #[serde(rename = "Mask")]
    mask: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct GoRoute {
    #[serde(rename = "Dst")]
    dst: Option<GoIpNet>,
    #[serde(rename = "Gw")]
    gw: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct GoIpNet {
    #[serde(rename = "IP")]
    ip: String,
    #[serde(rename = "Mask")]
    mask: Option<String>,
}

/// A Go `net.IP` text: `""` is nil; IPv4-mapped IPv6 counts as IPv4; other IPv6 is not ours.
fn go_ipv4(s: &str) -> Result<Option<Ipv4Addr>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => Ok(Some(v4)),
        Ok(IpAddr::V6(v6)) => Ok(v6.to_ipv4_mapped()),
        Err(_) => Err(format!("{s:?} is not an IP address")),
    }
}

fn go_bytes(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("{s:?} is not base64: {e}"))
}

/// A Go `net.IPMask` of 4 bytes, or 16 with the IPv4 part last.
fn go_mask(s: &str) -> Result<Ipv4Addr, String> {
    let raw = go_bytes(s)?;
    match raw.len() {
        4 | 16 => {
            let v4: [u8; 4] = raw[raw.len() - 4..]
                .try_into()
                .map_err(|_| "mask".to_string())?;
            Ok(Ipv4Addr::from(v4))
        }
        n => Err(format!("mask of {n} bytes, want 4 or 16")),
    }
}

fn mask_prefix(mask: Ipv4Addr) -> u8 {
    u8::try_from(u32::from(mask).leading_ones()).unwrap_or(32) // at most 32
}

/// Parses the cache file's JSON into a lease (the `AdvertisingIPAddr` and MTU the handler wrote
/// are replaced by the launcher, as KubeVirt replaces them).
pub fn parse(iface: &str, json: &[u8]) -> Result<DhcpConfig, NetworkError> {
    let bad = |reason: String| NetworkError::config(iface, format!("vif cache: {reason}"));
    let go: GoDhcpConfig = serde_json::from_slice(json).map_err(|e| bad(e.to_string()))?;
    let ip = match (&go.ip.ip, &go.ip.mask) {
        (Some(ip), Some(mask)) => go_ipv4(ip)
            .map_err(&bad)?
            .map(|ip| go_mask(mask).map(|m| (ip, m)))
            .transpose()
            .map_err(&bad)?,
        _ => None,
    };
    let mac = match go.mac.as_deref() {
        None | Some("") => None,
        Some(b64) => {
            let raw = go_bytes(b64).map_err(&bad)?;
            Some(
                <[u8; 6]>::try_from(raw.as_slice())
                    .map_err(|_| bad(format!("MAC of {} bytes, want 6", raw.len())))?,
            )
        }
    };
    let mut routes = Vec::new();
    for r in go.routes.iter().flatten() {
        let gw = go_ipv4(&r.gw).map_err(&bad)?;
        let dst = match &r.dst {
            None => None,
            Some(n) => {
                let Some(ip) = go_ipv4(&n.ip).map_err(&bad)? else {
                    continue; // an IPv6 route has no place in option 121
                };
                let mask = n.mask.as_deref().map(go_mask).transpose().map_err(&bad)?;
                Some((ip, mask.map_or(32, mask_prefix)))
            }
        };
        routes.push(Route { dst, gw });
    }
    Ok(DhcpConfig {
        name: go.name,
        ip,
        mac,
        ipv6: None,
        server_ip: Ipv4Addr::UNSPECIFIED,
        gateway: go_ipv4(&go.gateway).map_err(&bad)?,
        routes,
        mtu: go.mtu,
        ipam_disabled: go.ipam_disabled,
        subdomain: go.subdomain,
    })
}

/// Reads `<dir>/vif-cache-<pod interface>.json`.
pub fn read(dir: &Path, iface: &str, pod_iface: &str) -> Result<DhcpConfig, NetworkError> {
    let path = dir.join(format!("vif-cache-{pod_iface}.json"));
    let json = std::fs::read(&path)
        .map_err(|e| NetworkError::config(iface, format!("read {}: {e}", path.display())))?;
    parse(iface, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by `testdata/vifcache-go` (Go's encoding/json over KubeVirt's field types).
    const FROM_GO: &str = include_str!("../../../testdata/vif-cache-eth0.json");

    #[test]
    fn the_go_written_cache_parses() {
        let cfg = parse("default", FROM_GO.as_bytes()).unwrap();
        assert_eq!(cfg.name, "eth0");
        assert_eq!(
            cfg.ip,
            Some((
                Ipv4Addr::new(10, 244, 1, 7),
                Ipv4Addr::new(255, 255, 255, 0)
            ))
        );
        assert_eq!(cfg.mac, Some([0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x07]));
        assert_eq!(cfg.gateway, Some(Ipv4Addr::new(10, 244, 1, 1)));
        assert_eq!((cfg.mtu, cfg.ipam_disabled), (1400, false));
        assert_eq!(
            cfg.routes,
            [
                Route {
                    dst: None,
                    gw: Some(Ipv4Addr::new(10, 244, 1, 1))
                },
                Route {
                    dst: Some((Ipv4Addr::new(10, 96, 0, 0), 12)),
                    gw: Some(Ipv4Addr::new(10, 244, 1, 254))
                },
                Route {
                    dst: Some((Ipv4Addr::new(10, 244, 1, 0), 24)),
                    gw: None
                },
            ]
        );
    }

    #[test]
    fn an_ipam_disabled_cache_has_no_address() {
        let json = br#"{"Name":"eth0","IP":{"Label":"","Flags":0},"IPv6":{},"MAC":null,
            "AdvertisingIPAddr":"","Routes":null,"Mtu":0,"IPAMDisabled":true,"Gateway":"","Subdomain":""}"#;
        let cfg = parse("default", json).unwrap();
        assert!(cfg.ipam_disabled);
        assert_eq!((cfg.ip, cfg.mac, cfg.gateway), (None, None, None));
    }

    #[test]
    fn broken_caches_name_the_interface() {
        let e = parse("default", br#"{"MAC":"!!"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("default") && e.contains("base64"), "{e}");
        let e = parse("default", b"{").unwrap_err().to_string();
        assert!(e.contains("vif cache"), "{e}");
    }

    /// The committed sample is what Go really writes: regenerated with `go run` (needs Go and
    /// the module proxy or a warm module cache).
    #[test]
    fn the_sample_matches_what_go_writes() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/vifcache-go");
        let out = std::process::Command::new("go")
            .arg("run")
            .arg(".")
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "`go run` in {} failed to start (is Go installed?): {e}",
                    dir.display()
                )
            });
        assert!(
            out.status.success(),
            "go run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), FROM_GO);
    }
}
