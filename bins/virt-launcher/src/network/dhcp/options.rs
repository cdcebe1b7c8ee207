//! The options KubeVirt's DHCPv4 server puts in every OFFER and ACK. The set is fixed when the
//! server starts and ignores the client's parameter request list, as KubeVirt's does: guests get
//! the same answer whatever they ask for.
//!
//! The values are dhcproto's typed options and dhcproto encodes them. What stays here is
//! KubeVirt's: which options, from which facts (the pod's resolver, MTU, routes, host name and
//! the VMI's `dhcpOptions`), the order of the classless routes (default routes last), the check
//! of search domains and the 255-byte limit on their list.
//!
//! One encoding differs from KubeVirt's (miekg/dns without compression): dhcproto writes the
//! domain search list (option 119) with RFC 1035 name compression, which RFC 3397 defines for
//! this option; a name that ends like an earlier one ends in a pointer to it. busybox udhcpc, ISC
//! dhclient and systemd-networkd decode it (the netns tests check udhcpc's search list). The
//! length limit is still KubeVirt's, on the uncompressed list.

use std::net::{Ipv4Addr, Ipv6Addr};

use dhcproto::Name;
use dhcproto::v4::{DhcpOption, DhcpOptions, OptionCode, UnknownOption};
use ipnet::Ipv4Net;
use kvrs_api::api::DHCPOptions;

use super::config::Route;

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

/// The options, keyed by code (so each appears once).
pub fn build(i: &OptionInputs<'_>) -> Result<DhcpOptions, OptionsError> {
    let mut o = DhcpOptions::new();
    o.insert(DhcpOption::DomainNameServer(i.dns.to_vec()));
    o.insert(DhcpOption::InterfaceMtu(i.mtu));
    if let Some(mask) = i.mask {
        o.insert(DhcpOption::SubnetMask(mask));
    }
    if let Some(router) = i.router {
        o.insert(DhcpOption::Router(vec![router]));
    }
    let routes = classless_routes(i.routes);
    if !routes.is_empty() {
        o.insert(DhcpOption::ClasslessStaticRoute(routes));
    }
    if let Some(search) = search_list(i.search)? {
        o.insert(DhcpOption::DomainSearch(search));
    }
    o.insert(DhcpOption::Hostname(i.hostname.to_string()));
    let domain = super::resolv::longest(i.search);
    if !domain.is_empty() {
        o.insert(DhcpOption::DomainName(domain.to_string()));
    }
    if let Some(c) = i.custom {
        custom(c, &mut o)?;
    }
    Ok(o)
}

fn custom(c: &DHCPOptions, o: &mut DhcpOptions) -> Result<(), OptionsError> {
    if let Some(tftp) = c.tftp_server_name.as_deref().filter(|s| !s.is_empty()) {
        o.insert(DhcpOption::TFTPServerName(tftp.as_bytes().to_vec()));
    }
    if let Some(file) = c.boot_file_name.as_deref().filter(|s| !s.is_empty()) {
        o.insert(DhcpOption::BootfileName(file.as_bytes().to_vec()));
    }
    let ntp = c.ntp_servers.as_deref().unwrap_or_default();
    if !ntp.is_empty() {
        let servers = ntp
            .iter()
            .map(|s| ipv4_of(s).ok_or_else(|| OptionsError::Ntp(s.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        o.insert(DhcpOption::NtpServers(servers));
    }
    for p in c.private_options.iter().flatten() {
        let private = p.option.filter(|n| PRIVATE_CODES.contains(n));
        if let Some(n) = private.and_then(|n| u8::try_from(n).ok()) {
            o.insert(DhcpOption::Unknown(UnknownOption::new(
                OptionCode::from(n), // 224..=254: no option dhcproto knows
                p.value.as_bytes().to_vec(),
            )));
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

/// RFC 3442 routes: destination and gateway (0.0.0.0 for an on-link route). Default routes go
/// last: a guest applying them in order would otherwise lack the route to their gateway.
pub fn classless_routes(routes: &[Route]) -> Vec<(Ipv4Net, Ipv4Addr)> {
    let (defaults, specific): (Vec<&Route>, Vec<&Route>) =
        routes.iter().partition(|r| r.dst.is_none());
    specific
        .into_iter()
        .chain(defaults)
        .filter_map(|r| {
            let (ip, width) = r.dst.unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
            // min(32): always a valid prefix length.
            let dst = Ipv4Net::new(ip, width.min(32)).ok()?;
            Some((dst, r.gw.unwrap_or(Ipv4Addr::UNSPECIFIED)))
        })
        .collect()
}

/// The domains for option 119, checked as KubeVirt checks them; `None` without domains.
fn search_list(domains: &[String]) -> Result<Option<Vec<Name>>, OptionsError> {
    if domains.is_empty() {
        return Ok(None);
    }
    let mut names = Vec::with_capacity(domains.len());
    // KubeVirt's limit is on the uncompressed list: per domain its labels, each with a length
    // byte, and the root label.
    let mut uncompressed = 0;
    for d in domains {
        if !valid_search_domain(d) {
            return Err(OptionsError::SearchDomain(d.clone()));
        }
        let name = Name::from_ascii(d).map_err(|_| OptionsError::SearchDomain(d.clone()))?;
        uncompressed += name.iter().map(|label| 1 + label.len()).sum::<usize>() + 1;
        names.push(name);
    }
    if uncompressed > MAX_SEARCH_BYTES {
        return Err(OptionsError::SearchTooLong(uncompressed));
    }
    Ok(Some(names))
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
    use dhcproto::{Encodable, Encoder};
    use kvrs_api::api::DHCPPrivateOptions;

    fn route(dst: Option<([u8; 4], u8)>, gw: Option<[u8; 4]>) -> Route {
        Route {
            dst: dst.map(|(ip, w)| (Ipv4Addr::from(ip), w)),
            gw: gw.map(Ipv4Addr::from),
        }
    }

    /// The option's value on the wire (after code and length).
    fn wire(opt: &DhcpOption) -> Vec<u8> {
        let mut out = Vec::new();
        opt.encode(&mut Encoder::new(&mut out)).unwrap();
        assert_eq!(usize::from(out[1]), out.len() - 2, "one part");
        out.split_off(2)
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
            wire(&DhcpOption::ClasslessStaticRoute(classless_routes(&routes))),
            [
                8, 10, 10, 1, 2, 3, 24, 192, 168, 1, 192, 168, 2, 3, 24, 10, 244, 1, 0, 0, 0, 0, 0,
                10, 1, 2, 3
            ]
        );
    }

    #[test]
    fn search_domains_are_dns_labels() {
        let d = ["example.com".to_string()];
        let names = search_list(&d).unwrap().unwrap();
        assert_eq!(
            wire(&DhcpOption::DomainSearch(names)),
            b"\x07example\x03com\x00"
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
            assert!(search_list(&[good.to_string()]).is_ok(), "{good}");
        }
        let many: Vec<String> = (0..20).map(|i| format!("domain{i}.example.com")).collect();
        assert_eq!(search_list(&many), Err(OptionsError::SearchTooLong(430)));
    }

    /// dhcproto compresses names that end like an earlier one (RFC 3397 allows it; KubeVirt
    /// does not compress); the limit is still on the uncompressed length.
    #[test]
    fn a_search_list_is_compressed_on_the_wire() {
        let d: Vec<String> = [
            "default.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
        ]
        .map(String::from)
        .into();
        let names = search_list(&d).unwrap().unwrap();
        assert_eq!(
            wire(&DhcpOption::DomainSearch(names)),
            b"\x07default\x03svc\x07cluster\x05local\x00\xc0\x08\xc0\x0c"
        );
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
        let value = |code: u8| wire(o.get(OptionCode::from(code)).unwrap());
        assert_eq!(value(67), b"pxelinux.0");
        assert_eq!(value(66), b"tftp.example");
        assert_eq!(value(42), [10, 0, 0, 5, 10, 0, 0, 6]);
        assert_eq!(value(240), b"extra");
        assert_eq!(value(12), b"vm");
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
