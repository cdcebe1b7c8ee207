//! Name-based (version 5, SHA-1) UUIDs, as RFC 4122 defines them. The digest comes from the
//! workspace's `sha1` crate (also used for the launcher pod's name hashes).

use sha1::Digest as _;

/// Parses the canonical `8-4-4-4-12` hex form into 16 bytes.
pub fn parse(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.bytes().filter(|b| *b != b'-').collect();
    if hex.len() != 32 || text.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// Formats 16 bytes in the canonical lower-case `8-4-4-4-12` form.
pub fn format(bytes: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The version 5 UUID of `name` in `namespace`: SHA-1 over the namespace's 16 bytes followed by
/// the name, truncated to 16 bytes, with the version nibble set to 5 and the RFC 4122 variant.
pub fn v5(namespace: &[u8; 16], name: &[u8]) -> String {
    let digest = sha1::Sha1::new()
        .chain_update(namespace)
        .chain_update(name)
        .finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x50;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    format(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// KubeVirt's firmware namespace (see `super::super::firmware`).
    const FIRMWARE_NS: &str = "6a1a24a1-4061-4607-8bf4-a3963d0c5895";

    #[test]
    fn v5_over_the_fips_sha1_messages_matches_an_independent_implementation() {
        // The FIPS 180 SHA-1 test messages as names (empty, one block, two blocks, a million
        // bytes), with the expected UUIDs from Python's uuid.uuid5.
        let ns = parse(FIRMWARE_NS).unwrap();
        assert_eq!(v5(&ns, b""), "2eb17a2d-ccc6-58e5-84e2-5684c434c9f0");
        assert_eq!(v5(&ns, b"abc"), "82a6fd59-76a5-5ab3-81c3-b20cf36a8600");
        assert_eq!(
            v5(
                &ns,
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            ),
            "b5d4b60f-dfc9-5042-a883-fe15488f1dd6"
        );
        let million_a = vec![b'a'; 1_000_000];
        assert_eq!(v5(&ns, &million_a), "ad9233fd-af24-5653-bbe1-f65443c1310d");
    }

    #[test]
    fn v5_matches_rfc_examples() {
        // The DNS namespace and "python.org", as in Python's uuid documentation.
        let dns = parse("6ba7b810-9dad-11d1-80b4-00c04fd430c8").unwrap();
        assert_eq!(
            v5(&dns, b"python.org"),
            "886313e1-3b8a-5372-9b90-0c9aee199e5d"
        );
    }

    #[test]
    fn parse_and_format_round_trip() {
        let text = "6a1a24a1-4061-4607-8bf4-a3963d0c5895";
        assert_eq!(format(&parse(text).unwrap()), text);
        assert_eq!(parse("not-a-uuid"), None);
    }
}
