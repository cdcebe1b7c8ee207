//! What may become a path on this machine, validated as the real components validate it
//! before anything is joined to a directory: namespaces as DNS-1123 labels and pod names as
//! DNS-1123 subdomains (kube-apiserver's rules), volume names as DNS-1123 labels (its pod
//! validation), image references by the OCI distribution reference grammar (what the container
//! runtime parses; `..` is no reference). The API server of `kvrs run` refuses such objects
//! already; the kubelet does not rely on it, since it also runs against any API server.

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && is_label_pattern(s)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` of any length (apimachinery limits a subdomain's length,
/// not its labels').
fn is_label_pattern(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-')
}

/// Dot-separated DNS-1123 labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_pattern)
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`: a path component of an image name.
fn is_path_component(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator: `.`, `_`, `__`, or one or more `-`, then an alphanumeric.
        let start = i;
        match b[i] {
            b'.' => i += 1,
            b'_' => i += if b.get(i + 1) == Some(&b'_') { 2 } else { 1 },
            b'-' => {
                while b.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            _ => return false,
        }
        if i == start || !b.get(i).is_some_and(|&c| alnum(c)) {
            return false;
        }
    }
    true
}

/// `host[:port]`: dot-separated `[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?` or a bracketed IPv6
/// address, and an optional decimal port.
fn is_domain(s: &str) -> bool {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return false;
        };
        if v6.is_empty() || !v6.bytes().all(|c| c.is_ascii_hexdigit() || c == b':') {
            return false;
        }
        match after {
            "" => return true,
            p => match p.strip_prefix(':') {
                Some(port) => ("x", Some(port)),
                None => return false,
            },
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let component = |c: &str| {
        let b = c.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|&x| x.is_ascii_alphanumeric() || x == b'-')
    };
    host.split('.').all(component)
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
}

/// `[\w][\w.-]{0,127}`
fn is_tag(s: &str) -> bool {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|&c| word(c) || c == b'.' || c == b'-')
}

/// `algorithm:hex`, the algorithm `[A-Za-z][A-Za-z0-9]*` components joined by `+._-`, at
/// least 32 hex digits.
fn is_digest(s: &str) -> bool {
    let Some((alg, hex)) = s.split_once(':') else {
        return false;
    };
    let alg_ok = alg.split(['+', '.', '_', '-']).all(|c| {
        let b = c.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    });
    alg_ok && hex.len() >= 32 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

/// Checks an image reference against the distribution reference grammar
/// (`[domain/]path[:tag][@digest]`, the name at most 255 characters); the error says why.
pub fn check_image_reference(reference: &str) -> Result<(), &'static str> {
    let (rest, digest) = match reference.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (reference, None),
    };
    if digest.is_some_and(|d| !is_digest(d)) {
        return Err("invalid digest");
    }
    // A tag's `:` comes after the last `/` (a domain's port comes before it).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if tag.is_some_and(|t| !is_tag(t)) {
        return Err("invalid tag");
    }
    if name.is_empty() {
        return Err("repository name must have at least one component");
    }
    if name.len() > 255 {
        return Err("repository name must not be more than 255 characters");
    }
    let mut components = name.split('/');
    let first = components.next().unwrap_or("");
    let remote: Vec<&str> = components.collect();
    let ok = if remote.is_empty() {
        is_path_component(first)
    } else {
        (is_path_component(first) || is_domain(first))
            && remote.iter().all(|c| is_path_component(c))
    };
    if ok {
        Ok(())
    } else {
        Err("invalid reference format")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_follow_the_distribution_grammar() {
        for good in [
            "busybox",
            "quay.io/containerdisks/fedora:41",
            "localhost:5000/a/b_c__d-e.f:v1.2-3",
            "registry.example.com/ns/disk@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "[::1]:5000/x:latest",
            "kvrs/guest-kernel:e2e",
        ] {
            assert_eq!(check_image_reference(good), Ok(()), "{good}");
        }
        for bad in [
            "..",
            ".",
            "../x",
            "a/../b",
            "a/./b",
            "/abs",
            "a//b",
            "",
            "A",
            "a:",
            "a@sha256:00",
            "a b",
            "a\0b",
            "a/.hidden",
            "-a",
            "a_-b",
        ] {
            assert!(check_image_reference(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_that_leave_a_directory_are_refused() {
        for bad in ["..", ".", "../x", "a/b", "", "a b", "A", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad:?}");
        }
        assert!(!is_dns1123_subdomain("../../../../tmp/x"));
        assert!(is_dns1123_subdomain("virt-launcher-guest-abcde"));
        assert!(is_dns1123_label("default"));
    }
}
