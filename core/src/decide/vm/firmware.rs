//! The stable firmware UUID of a VM.
//!
//! A VM whose template names no firmware UUID still needs the same SMBIOS UUID on every start
//! (guests key licences and machine IDs on it). KubeVirt derives it from the VM name as a
//! name-based (version 5, SHA-1) UUID in a fixed namespace, so the same name always yields the
//! same UUID, also across a kvrs/KubeVirt switch.

/// The namespace UUID KubeVirt uses for firmware UUIDs (`6a1a24a1-4061-4607-8bf4-a3963d0c5895`).
const FIRMWARE_NAMESPACE: [u8; 16] = [
    0x6a, 0x1a, 0x24, 0xa1, 0x40, 0x61, 0x46, 0x07, 0x8b, 0xf4, 0xa3, 0x96, 0x3d, 0x0c, 0x58, 0x95,
];

/// The firmware UUID for a VM named `name`, in canonical lower-case 8-4-4-4-12 form.
pub fn legacy_firmware_uuid(name: &str) -> String {
    let mut input = FIRMWARE_NAMESPACE.to_vec();
    input.extend_from_slice(name.as_bytes());
    let digest = sha1(&input);
    let mut u = [0u8; 16];
    u.copy_from_slice(&digest[..16]);
    u[6] = (u[6] & 0x0f) | 0x50; // version 5
    u[8] = (u[8] & 0x3f) | 0x80; // RFC 4122 variant
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// SHA-1 (FIPS 180-4). Only used to derive UUIDs, never for security.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (hv, v) in h.iter_mut().zip([a, b, c, d, e]) {
            *hv = hv.wrapping_add(v);
        }
    }
    let mut out = [0u8; 20];
    for (i, v) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_known_answer() {
        let hex: String = sha1(b"abc").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "a9993e364706816aba3e25717850c26c9cd0d89d");
    }

    #[test]
    fn uuid_for_vm1_matches_kubevirt() {
        // The value KubeVirt v1.9.0 patched into VM "vm1" (oracle case vm-no-firmware-uuid).
        assert_eq!(
            legacy_firmware_uuid("vm1"),
            "133bf63e-9459-5126-9b21-b56e9b3d17b3"
        );
    }
}
