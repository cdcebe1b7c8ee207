//! BOOTP/DHCPv4 messages (RFC 2131, RFC 2132): the fixed header, the magic cookie and the option
//! list. Parsing never panics on hostile bytes — the guest controls every packet the server reads.

use std::net::Ipv4Addr;

/// `op` of a client's message.
pub const BOOT_REQUEST: u8 = 1;
/// `op` of a server's message.
pub const BOOT_REPLY: u8 = 2;
/// The four bytes between the BOOTP header and the options.
const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];
/// Fixed header (236 bytes) plus the cookie.
const HEADER_LEN: usize = 240;
/// Replies are padded to this many bytes, as KubeVirt's server library does (300 bytes with the
/// IP and UDP headers, the BOOTP minimum some old clients insist on).
const MIN_REPLY_LEN: usize = 272;
const OPT_PAD: u8 = 0;
const OPT_END: u8 = 255;
/// The broadcast bit of `flags`.
const FLAG_BROADCAST: u16 = 0x8000;

/// Option 53: the DHCP message type.
pub const OPT_MESSAGE_TYPE: u8 = 53;

/// Values of option 53.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    /// DHCPDISCOVER.
    Discover = 1,
    /// DHCPOFFER.
    Offer = 2,
    /// DHCPREQUEST.
    Request = 3,
    /// DHCPDECLINE.
    Decline = 4,
    /// DHCPACK.
    Ack = 5,
    /// DHCPNAK.
    Nak = 6,
    /// DHCPRELEASE.
    Release = 7,
    /// DHCPINFORM.
    Inform = 8,
}

impl MessageType {
    /// The type for the option byte, `None` outside 1..=8.
    pub fn from_byte(b: u8) -> Option<MessageType> {
        use MessageType::*;
        Some(match b {
            1 => Discover,
            2 => Offer,
            3 => Request,
            4 => Decline,
            5 => Ack,
            6 => Nak,
            7 => Release,
            8 => Inform,
            _ => return None,
        })
    }
}

/// Why bytes are not a DHCP message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Shorter than the fixed header.
    #[error("message of {0} bytes is shorter than the 240-byte BOOTP header")]
    TooShort(usize),
    /// The cookie is not 99.130.83.99.
    #[error("no DHCP magic cookie")]
    NoCookie,
    /// `hlen` exceeds the 16-byte `chaddr` field.
    #[error("hardware address length {0} exceeds 16")]
    BadHardwareLength(u8),
    /// An option's length runs past the end of the message.
    #[error("option {code} claims {len} bytes past the end of the message")]
    TruncatedOption {
        /// The option code.
        code: u8,
        /// Its claimed length.
        len: usize,
    },
}

/// One DHCP message. Options keep their order; a code may repeat (RFC 3396 splits long values
/// into consecutive options of the same code, which [`Packet::option`] joins again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// [`BOOT_REQUEST`] or [`BOOT_REPLY`].
    pub op: u8,
    /// Hardware type (1: Ethernet).
    pub htype: u8,
    /// Hardware address length.
    pub hlen: u8,
    /// Relay hops.
    pub hops: u8,
    /// Transaction id chosen by the client.
    pub xid: u32,
    /// Seconds since the client began.
    pub secs: u16,
    /// Flags (broadcast bit).
    pub flags: u16,
    /// The client's current address.
    pub ciaddr: Ipv4Addr,
    /// The address offered to the client.
    pub yiaddr: Ipv4Addr,
    /// Next server.
    pub siaddr: Ipv4Addr,
    /// Relay agent.
    pub giaddr: Ipv4Addr,
    /// Client hardware address field (first `hlen` bytes significant).
    pub chaddr: [u8; 16],
    /// Server host name field.
    pub sname: [u8; 64],
    /// Boot file field.
    pub file: [u8; 128],
    /// Options in wire order, without pad and end.
    pub options: Vec<(u8, Vec<u8>)>,
}

impl Default for Packet {
    fn default() -> Packet {
        Packet {
            op: BOOT_REQUEST,
            htype: 1,
            hlen: 6,
            hops: 0,
            xid: 0,
            secs: 0,
            flags: 0,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            siaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::UNSPECIFIED,
            chaddr: [0; 16],
            sname: [0; 64],
            file: [0; 128],
            options: Vec::new(),
        }
    }
}

fn ip_at(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

impl Packet {
    /// Parses a message; the option area ends at option 255 or at the end of the bytes.
    pub fn parse(b: &[u8]) -> Result<Packet, PacketError> {
        if b.len() < HEADER_LEN {
            return Err(PacketError::TooShort(b.len()));
        }
        if b[236..240] != MAGIC_COOKIE {
            return Err(PacketError::NoCookie);
        }
        if b[2] > 16 {
            return Err(PacketError::BadHardwareLength(b[2]));
        }
        let mut p = Packet {
            op: b[0],
            htype: b[1],
            hlen: b[2],
            hops: b[3],
            xid: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            secs: u16::from_be_bytes([b[8], b[9]]),
            flags: u16::from_be_bytes([b[10], b[11]]),
            ciaddr: ip_at(b, 12),
            yiaddr: ip_at(b, 16),
            siaddr: ip_at(b, 20),
            giaddr: ip_at(b, 24),
            ..Packet::default()
        };
        p.chaddr.copy_from_slice(&b[28..44]);
        p.sname.copy_from_slice(&b[44..108]);
        p.file.copy_from_slice(&b[108..236]);
        let mut rest = &b[HEADER_LEN..];
        while let Some((&code, tail)) = rest.split_first() {
            match code {
                OPT_PAD => rest = tail,
                OPT_END => break,
                _ => {
                    let Some((&len, data)) = tail.split_first() else {
                        return Err(PacketError::TruncatedOption { code, len: 1 });
                    };
                    let len = usize::from(len);
                    let Some(value) = data.get(..len) else {
                        return Err(PacketError::TruncatedOption { code, len });
                    };
                    p.options.push((code, value.to_vec()));
                    rest = &data[len..];
                }
            }
        }
        Ok(p)
    }

    /// The wire form: header, cookie, options (values over 255 bytes split per RFC 3396), end,
    /// then zero padding up to the 272-byte minimum.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(MIN_REPLY_LEN + 64);
        b.extend_from_slice(&[self.op, self.htype, self.hlen, self.hops]);
        b.extend_from_slice(&self.xid.to_be_bytes());
        b.extend_from_slice(&self.secs.to_be_bytes());
        b.extend_from_slice(&self.flags.to_be_bytes());
        for ip in [self.ciaddr, self.yiaddr, self.siaddr, self.giaddr] {
            b.extend_from_slice(&ip.octets());
        }
        b.extend_from_slice(&self.chaddr);
        b.extend_from_slice(&self.sname);
        b.extend_from_slice(&self.file);
        b.extend_from_slice(&MAGIC_COOKIE);
        for (code, value) in &self.options {
            if value.is_empty() {
                b.extend_from_slice(&[*code, 0]);
            }
            for chunk in value.chunks(255) {
                b.push(*code);
                b.push(u8::try_from(chunk.len()).unwrap_or(u8::MAX)); // chunks(255): always fits
                b.extend_from_slice(chunk);
            }
        }
        b.push(OPT_END);
        if b.len() < MIN_REPLY_LEN {
            b.resize(MIN_REPLY_LEN, 0);
        }
        b
    }

    /// The value of option `code`, the parts of a split option joined; `None` when absent.
    pub fn option(&self, code: u8) -> Option<Vec<u8>> {
        let mut parts = self.options.iter().filter(|(c, _)| *c == code).peekable();
        parts.peek()?;
        Some(parts.flat_map(|(_, v)| v.iter().copied()).collect())
    }

    /// The message type (option 53), when present and valid.
    pub fn message_type(&self) -> Option<MessageType> {
        match self.option(OPT_MESSAGE_TYPE)?.as_slice() {
            [t] => MessageType::from_byte(*t),
            _ => None,
        }
    }

    /// The significant bytes of `chaddr`.
    pub fn client_hardware_address(&self) -> &[u8] {
        &self.chaddr[..usize::from(self.hlen.min(16))]
    }

    /// The client asked for broadcast replies.
    pub fn wants_broadcast(&self) -> bool {
        self.flags & FLAG_BROADCAST != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn discover() -> Packet {
        let mut p = Packet {
            xid: 0xdead_beef,
            flags: FLAG_BROADCAST,
            ..Packet::default()
        };
        p.chaddr[..6].copy_from_slice(&[2, 0, 0, 0, 0, 7]);
        p.options.push((OPT_MESSAGE_TYPE, vec![1]));
        p.options.push((55, vec![1, 3, 6, 15, 26]));
        p
    }

    #[test]
    fn a_message_round_trips() {
        let p = discover();
        let wire = p.encode();
        assert_eq!(wire.len(), MIN_REPLY_LEN);
        assert_eq!(Packet::parse(&wire), Ok(p.clone()));
        let parsed = Packet::parse(&wire).unwrap();
        assert_eq!(parsed.message_type(), Some(MessageType::Discover));
        assert_eq!(parsed.client_hardware_address(), &[2, 0, 0, 0, 0, 7]);
        assert!(parsed.wants_broadcast());
    }

    #[test]
    fn long_options_are_split_and_joined() {
        let mut p = discover();
        p.options.push((119, vec![7; 300]));
        let parsed = Packet::parse(&p.encode()).unwrap();
        assert_eq!(parsed.option(119), Some(vec![7; 300]));
        assert_eq!(parsed.options.iter().filter(|(c, _)| *c == 119).count(), 2);
    }

    #[test]
    fn broken_messages_are_refused() {
        assert_eq!(Packet::parse(&[0; 10]), Err(PacketError::TooShort(10)));
        assert_eq!(Packet::parse(&[0; 240]), Err(PacketError::NoCookie));
        let mut wire = discover().encode();
        wire.truncate(240);
        wire.extend_from_slice(&[12, 9, b'x']);
        assert_eq!(
            Packet::parse(&wire),
            Err(PacketError::TruncatedOption { code: 12, len: 9 })
        );
        let mut wire = discover().encode();
        wire[2] = 17;
        assert_eq!(
            Packet::parse(&wire),
            Err(PacketError::BadHardwareLength(17))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            let _ = Packet::parse(&bytes);
        }

        #[test]
        fn arbitrary_option_areas_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut wire = discover().encode();
            wire.truncate(240);
            wire.extend_from_slice(&tail);
            if let Ok(p) = Packet::parse(&wire) {
                let _ = p.message_type();
                let _ = p.client_hardware_address();
            }
        }

        #[test]
        fn encode_then_parse_is_identity(
            xid in any::<u32>(),
            flags in any::<u16>(),
            hlen in 0u8..=16,
            yiaddr in any::<[u8; 4]>(),
            options in proptest::collection::vec(
                (1u8..=254, proptest::collection::vec(any::<u8>(), 1..=255)), 0..8),
        ) {
            let p = Packet {
                op: BOOT_REPLY,
                xid,
                flags,
                hlen,
                yiaddr: Ipv4Addr::from(yiaddr),
                options,
                ..Packet::default()
            };
            prop_assert_eq!(Packet::parse(&p.encode()), Ok(p));
        }
    }
}
