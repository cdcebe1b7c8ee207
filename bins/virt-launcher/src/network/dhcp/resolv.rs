//! The pod's resolver configuration, read the way KubeVirt reads it before it starts the DHCP
//! server: the guest resolves names through the same servers and search list as the pod.

use std::net::{IpAddr, Ipv4Addr};

/// Given to the guest when the pod's resolv.conf names no server at all.
const DEFAULT_DNS: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);
/// Given to the guest when the pod's resolv.conf has no search line.
const DEFAULT_SEARCH_DOMAIN: &str = "cluster.local";
/// Kubernetes service domains contain this label sequence.
const SERVICE_INFIX: &str = ".svc.";

/// Name servers and search domains from a resolv.conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolver {
    /// IPv4 name servers, in file order (the DHCPv4 server hands out only these).
    pub ipv4: Vec<Ipv4Addr>,
    /// Whether IPv6 name servers were listed (they count against the 8.8.8.8 fallback).
    pub has_ipv6: bool,
    /// IPv6 name servers, in file order (the DHCPv6 server hands out these).
    pub ipv6: Vec<std::net::Ipv6Addr>,
    /// Search domains, lower-cased, in file order.
    pub search: Vec<String>,
}

impl Resolver {
    /// Parses resolv.conf text. Lines are matched by prefix as KubeVirt matches them; a
    /// `nameserver` line with other than one value, or a value that is no address, is skipped.
    pub fn parse(text: &str) -> Resolver {
        let mut r = Resolver {
            ipv4: Vec::new(),
            has_ipv6: false,
            ipv6: Vec::new(),
            search: Vec::new(),
        };
        for line in text.lines() {
            if line.starts_with("nameserver") {
                let fields: Vec<&str> = line.split_whitespace().collect();
                match fields.as_slice() {
                    [_, ip] => match ip.parse::<IpAddr>() {
                        Ok(IpAddr::V4(v4)) => r.ipv4.push(v4),
                        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                            Some(v4) => r.ipv4.push(v4),
                            None => {
                                r.has_ipv6 = true;
                                r.ipv6.push(v6);
                            }
                        },
                        Err(_) => {}
                    },
                    _ => crate::log::warn(format_args!(
                        "Invalid resolv.conf format: nameserver line should have only one value per line '{line}'"
                    )),
                }
            }
            if let Some(rest) = line.strip_prefix("search") {
                r.search
                    .extend(rest.split_whitespace().map(str::to_ascii_lowercase));
            }
        }
        if r.ipv4.is_empty() && !r.has_ipv6 {
            r.ipv4.push(DEFAULT_DNS);
        }
        if r.search.is_empty() {
            r.search.push(DEFAULT_SEARCH_DOMAIN.to_string());
        }
        r
    }

    /// The search list the guest gets: with a subdomain, `<subdomain>.<longest service domain>`
    /// first — Kubernetes leaves it out of the pod's file (old glibc's six-domain limit), but a
    /// VMI with `spec.subdomain` is resolvable under it.
    pub fn search_with_subdomain(&self, subdomain: &str) -> Vec<String> {
        let mut out = Vec::with_capacity(self.search.len() + 1);
        if !subdomain.is_empty() {
            let service = longest(self.search.iter().filter(|d| d.contains(SERVICE_INFIX)));
            if !service.is_empty() && !service.starts_with(&format!("{subdomain}.")) {
                out.push(format!("{subdomain}.{service}"));
            }
        }
        out.extend(self.search.iter().cloned());
        out
    }
}

/// The longest entry (the first of equal length): the most specific domain, which KubeVirt also
/// announces as the domain name (Windows guests resolve with it).
pub fn longest<'a>(domains: impl IntoIterator<Item = &'a String>) -> &'a str {
    let mut best = "";
    for d in domains {
        if d.len() > best.len() {
            best = d;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "search default.svc.cluster.local svc.cluster.local cluster.local\n\
                       nameserver 10.96.0.10\n\
                       nameserver fd00::10\n\
                       nameserver 1.1.1.1 8.8.4.4\n\
                       nameserver bogus\n\
                       options ndots:5\n";

    #[test]
    fn servers_and_search_domains_come_from_the_file() {
        let r = Resolver::parse(POD);
        assert_eq!(r.ipv4, vec![Ipv4Addr::new(10, 96, 0, 10)]);
        assert!(r.has_ipv6);
        assert_eq!(
            r.search,
            [
                "default.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
    }

    #[test]
    fn an_empty_file_gets_kubevirts_defaults() {
        let r = Resolver::parse("");
        assert_eq!(r.ipv4, vec![DEFAULT_DNS]);
        assert_eq!(r.search, ["cluster.local"]);
        let only_v6 = Resolver::parse("nameserver fd00::1\n");
        assert!(only_v6.ipv4.is_empty());
    }

    #[test]
    fn a_subdomain_is_prepended_once() {
        let r = Resolver::parse(POD);
        assert_eq!(
            r.search_with_subdomain("web")[0],
            "web.default.svc.cluster.local"
        );
        assert_eq!(r.search_with_subdomain("").len(), 3);
        let already = Resolver::parse("search web.default.svc.cluster.local\n");
        assert_eq!(already.search_with_subdomain("web").len(), 1);
    }
}
