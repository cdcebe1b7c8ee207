//! The options KubeVirt's DHCPv4 server puts in every OFFER and ACK. The set is fixed when the
//! server starts and ignores the client's parameter request list, as KubeVirt's does: guests get
//! the same answer whatever they ask for.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use kvrs_api::api::DHCPOptions;

use super::config::Route;

/// Option codes (RFC 2132 unless noted).
pub mod code {
    /// Subnet mask.
    pub const SUBNET_MASK: u8 = 1;
    /// Router.
    pub const ROUTER: u8 = 3;
    /// Domain name servers.
    pub const DNS: u8 = 6;
    /// Host name.
    pub const HOST_NAME: u8 = 12;
    /// Domain name.
    pub const DOMAIN_NAME: u8 = 15;
    /// NTP servers.
    pub const NTP: u8 = 42;
    /// IP address lease time.
    pub const LEASE_TIME: u8 = 51;
    /// Server identifier.
    pub const SERVER_ID: u8 = 54;
    /// Interface MTU.
    pub const MTU: u8 = 26;
    /// TFTP server name.
    pub const TFTP_SERVER: u8 = 66;
    /// Boot file name.
    pub const BOOT_FILE: u8 = 67;
    /// Domain search list (RFC 3397).
    pub const DOMAIN_SEARCH: u8 = 119;
    /// Classless static routes (RFC 3442).
    pub const CLASSLESS_ROUTES: u8 = 121;
}

/// The site-specific option codes a VMI may set through `dhcpOptions.privateOptions`.
const PRIVATE_CODES: std::ops::RangeInclusive<i32> = 224..=254;
/// A search list longer than this does not fit one DHCP option (KubeVirt refuses it).
const MAX_SEARCH_BYTES: usize = 255;

/// Why the options cannot be built (the server does not start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// A search domain that is not a valid DNS name.
    #[error("search domain is not valid: {0:?}")]
    SearchDomain(String),
    /// The encoded search list is longer than one option can carry.
    #[error("search domains length exceeded allowable size: was {0} long")]
    SearchTooLong(usize),
    /// An NTP server from `dhcpOptions.ntpServers` that is no IPv4 address.
    #[error("could not parse NTP server as IPv4 address: {0}")]
    Ntp(String),
}

/// What the options are made of.
#[derive(Debug, Clone, Default)]
pub struct OptionInputs<'a> {
    /// The guest's subnet mask (absent: not sent).
    pub mask: Option<Ipv4Addr>,
    /// The guest's default gateway (absent: not sent).
    pub router: Option<Ipv4Addr>,
    /// IPv4 name servers.
    pub dns: &'a [Ipv4Addr],
    /// Routes for option 121.
    pub routes: &'a [Route],
    /// Search domains (subdomain already prepended).
    pub search: &'a [String],
    /// The pod NIC's MTU.
    pub mtu: u16,
    /// The pod's host name (the guest takes it as its own).
    pub hostname: &'a str,
    /// `spec.domain.devices.interfaces[].dhcpOptions`.
    pub custom: Option<&'a DHCPOptions>,
}

/// The options, keyed by code (so each appears once, sent in code order).
pub fn build(i: &OptionInputs<'_>) -> Result<BTreeMap<u8, Vec<u8>>, OptionsError> {
    let mut o = BTreeMap::new();
    o.insert(code::DNS, i.dns.iter().flat_map(|ip| ip.octets()).collect());
    o.insert(code::MTU, i.mtu.to_be_bytes().to_vec());
    if let Some(mask) = i.mask {
        o.insert(code::SUBNET_MASK, mask.octets().to_vec());
    }
    if let Some(router) = i.router {
        o.insert(code::ROUTER, router.octets().to_vec());
    }
    let routes = classless_routes(i.routes);
    if !routes.is_empty() {
        o.insert(code::CLASSLESS_ROUTES, routes);
    }
    if let Some(search) = search_list(i.search)? {
        o.insert(code::DOMAIN_SEARCH, search);
    }
    o.insert(code::HOST_NAME, i.hostname.as_bytes().to_vec());
    let domain = super::resolv::longest(i.search);
    if !domain.is_empty() {
        o.insert(code::DOMAIN_NAME, domain.as_bytes().to_vec());
    }
    if let Some(c) = i.custom {
        custom(c, &mut o)?;
    }
    Ok(o)
}

fn custom(c: &DHCPOptions, o: &mut BTreeMap<u8, Vec<u8>>) -> Result<(), OptionsError> {
    if let Some(tftp) = c.tftp_server_name.as_deref().filter(|s| !s.is_empty()) {
        o.insert(code::TFTP_SERVER, tftp.as_bytes().to_vec());
    }
    if let Some(file) = c.boot_file_name.as_deref().filter(|s| !s.is_empty()) {
        o.insert(code::BOOT_FILE, file.as_bytes().to_vec());
    }
    let ntp = c.ntp_servers.as_deref().unwrap_or_default();
    if !ntp.is_empty() {
        let mut bytes = Vec::with_capacity(ntp.len() * 4);
        for server in ntp {
            bytes.extend(
                ipv4_of(server)
                    .ok_or_else(|| OptionsError::Ntp(server.clone()))?
                    .octets(),
            );
        }
        o.insert(code::NTP, bytes);
    }
    for p in c.private_options.iter().flatten() {
        let private = p.option.filter(|n| PRIVATE_CODES.contains(n));
        if let Some(n) = private.and_then(|n| u8::try_from(n).ok()) {
            o.insert(n, p.value.as_bytes().to_vec()); // 224..=254
        }
    }
    Ok(())
}

/// An IPv4 address, also in IPv4-mapped IPv6 form (what Go's `ParseIP(..).To4()` accepts).
fn ipv4_of(s: &str) -> Option<Ipv4Addr> {
    s.parse::<Ipv4Addr>()
        .ok()
        .or_else(|| s.parse::<Ipv6Addr>().ok()?.to_ipv4_mapped())
}

/// RFC 3442 routes: width, the significant destination octets, the gateway (0.0.0.0 for an
/// on-link route). Default routes go last: a guest applying them in order would otherwise lack
/// the route to their gateway.
pub fn classless_routes(routes: &[Route]) -> Vec<u8> {
    let (defaults, specific): (Vec<&Route>, Vec<&Route>) =
        routes.iter().partition(|r| r.dst.is_none());
    let mut out = Vec::new();
    for r in specific.into_iter().chain(defaults) {
        let (ip, width) = r.dst.unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
        let width = width.min(32);
        let octets = usize::from(width).div_ceil(8);
        out.push(width);
        out.extend_from_slice(&ip.octets()[..octets]);
        out.extend_from_slice(&r.gw.unwrap_or(Ipv4Addr::UNSPECIFIED).octets());
    }
    out
}

/// RFC 1035 labels for option 119 (no compression); `None` without domains.
fn search_list(domains: &[String]) -> Result<Option<Vec<u8>>, OptionsError> {
    if domains.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for d in domains {
        if !valid_search_domain(d) {
            return Err(OptionsError::SearchDomain(d.clone()));
        }
        for label in d.split('.') {
            // valid_search_domain: every label is 1..=63 bytes.
            out.push(u8::try_from(label.len()).map_err(|_| OptionsError::SearchDomain(d.clone()))?);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
    }
    if out.len() > MAX_SEARCH_BYTES {
        return Err(OptionsError::SearchTooLong(out.len()));
    }
    Ok(Some(out))
}

/// KubeVirt's check: lower-case labels of letters, digits, `-` and `_` (not at a label's end),
/// the last label starting with a letter; at most 253 characters. The empty string passes.
fn valid_search_domain(d: &str) -> bool {
    if d.len() > 253 {
        return false;
    }
    if d.is_empty() {
        return true;
    }
    let labels: Vec<&str> = d.split('.').collect();
    let (last, inner) = labels.split_last().unwrap_or((&"", &[]));
    // A label: first byte per `first_ok`, then up to 62 of `mid_ok` ending in a letter or digit.
    let label = |l: &str, first_ok: fn(u8) -> bool, mid_ok: fn(u8) -> bool| match l.as_bytes() {
        [] => false,
        [only] => first_ok(*only),
        [first, mid @ .., end] => {
            l.len() <= 63
                && first_ok(*first)
                && mid.iter().all(|c| mid_ok(*c))
                && matches!(end, b'a'..=b'z' | b'0'..=b'9')
        }
    };
    let inner_first = |c: u8| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_');
    let inner_mid = |c: u8| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-');
    let last_first = |c: u8| c.is_ascii_lowercase();
    let last_mid = |c: u8| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'-');
    // A trailing dot leaves an empty last label, which the pattern allows.
    inner.iter().all(|l| label(l, inner_first, inner_mid))
        && (last.is_empty() || label(last, last_first, last_mid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_api::api::DHCPPrivateOptions;

    fn route(dst: Option<([u8; 4], u8)>, gw: Option<[u8; 4]>) -> Route {
        Route {
            dst: dst.map(|(ip, w)| (Ipv4Addr::from(ip), w)),
            gw: gw.map(Ipv4Addr::from),
        }
    }

    #[test]
    fn classless_routes_put_the_default_last() {
        let routes = [
            route(None, Some([10, 1, 2, 3])),
            route(Some(([10, 0, 0, 0], 8)), Some([10, 1, 2, 3])),
            route(Some(([192, 168, 1, 0], 24)), Some([192, 168, 2, 3])),
            route(Some(([10, 244, 1, 0], 24)), None),
        ];
        assert_eq!(
            classless_routes(&routes),
            [
                8, 10, 10, 1, 2, 3, 24, 192, 168, 1, 192, 168, 2, 3, 24, 10, 244, 1, 0, 0, 0, 0, 0,
                10, 1, 2, 3
            ]
        );
    }

    #[test]
    fn search_domains_are_dns_labels() {
        let d = ["example.com".to_string()];
        assert_eq!(
            search_list(&d).unwrap().unwrap(),
            b"\x07example\x03com\x00".to_vec()
        );
        assert_eq!(search_list(&[]), Ok(None));
        for bad in [
            "Example.com",
            "a..b",
            "-a.com",
            "a-.com",
            "x.1com",
            "a b",
            "x.a_b",
        ] {
            assert!(
                search_list(&[bad.to_string()]).is_err(),
                "{bad} should be refused"
            );
        }
        for good in ["_srv.example.com", "a.b-c.io", "localdomain", "x.y."] {
            assert!(valid_search_domain(good), "{good} should pass");
        }
        let many: Vec<String> = (0..20).map(|i| format!("domain{i}.example.com")).collect();
        assert!(matches!(
            search_list(&many),
            Err(OptionsError::SearchTooLong(_))
        ));
    }

    #[test]
    fn custom_options_follow_the_vmi() {
        let custom = DHCPOptions {
            boot_file_name: Some("pxelinux.0".into()),
            tftp_server_name: Some("tftp.example".into()),
            ntp_servers: Some(vec!["10.0.0.5".into(), "::ffff:10.0.0.6".into()]),
            private_options: Some(vec![
                DHCPPrivateOptions {
                    option: Some(240),
                    value: "extra".into(),
                    ..Default::default()
                },
                DHCPPrivateOptions {
                    option: Some(12),
                    value: "ignored".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let o = build(&OptionInputs {
            hostname: "vm",
            custom: Some(&custom),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(o[&code::BOOT_FILE], b"pxelinux.0");
        assert_eq!(o[&code::TFTP_SERVER], b"tftp.example");
        assert_eq!(o[&code::NTP], [10, 0, 0, 5, 10, 0, 0, 6]);
        assert_eq!(o[&240], b"extra");
        assert_eq!(o[&code::HOST_NAME], b"vm");
        let bad = DHCPOptions {
            ntp_servers: Some(vec!["fd00::1".into()]),
            ..Default::default()
        };
        assert_eq!(
            build(&OptionInputs {
                custom: Some(&bad),
                ..Default::default()
            }),
            Err(OptionsError::Ntp("fd00::1".into()))
        );
    }
}
