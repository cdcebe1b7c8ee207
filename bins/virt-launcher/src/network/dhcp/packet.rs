//! DHCPv4 messages (RFC 2131, RFC 2132) on the wire, coded by `dhcproto`.
//!
//! A client's message is read through dhcproto's zero-copy view: the header fields and the raw
//! options the server looks at, none of the typed option decoding it does not need (the guest
//! controls every byte the server reads). Three checks stay here because the view does not make
//! them: at least the 240-byte header, the magic cookie, and `hlen` within the 16-byte `chaddr`.
//!
//! A reply is a [`Message`] whose header and options dhcproto encodes one by one. What stays here
//! is where they go, as KubeVirt's server library (krolaw/dhcp4) puts them: the message type,
//! the server identifier and the lease time first, then the other options (in code order, which
//! is dhcproto's), the end option, then zero padding to the 272-byte BOOTP minimum; an option
//! with an empty value goes out with length 0. dhcproto alone would put every option in code
//! order, leave empty ones out and not pad.

use dhcproto::Encodable;
use dhcproto::v4::borrowed;
use dhcproto::v4::{DhcpOption, EncodeError, Encoder, MAGIC, Message, OptionCode};

pub use dhcproto::v4::MessageType;

/// Fixed header (236 bytes) plus the cookie.
const HEADER_LEN: usize = 240;
/// The most hardware-address bytes `chaddr` holds.
const CHADDR_LEN: u8 = 16;
/// Replies are padded to this many bytes, as KubeVirt's server library does (300 bytes with the
/// IP and UDP headers, the BOOTP minimum some old clients insist on).
pub const MIN_REPLY_LEN: usize = 272;
/// The options every reply starts with, in this order.
const LEADING: [OptionCode; 3] = [
    OptionCode::MessageType,
    OptionCode::ServerIdentifier,
    OptionCode::AddressLeaseTime,
];

/// Why bytes are not a DHCP message the server reads.
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
}

/// A client's message, checked so that every field read from it is within its bytes.
#[derive(Debug)]
pub struct Request<'a>(borrowed::Message<'a>);

impl<'a> Request<'a> {
    /// Reads a client's message. Options are read lazily; the option area ends at the end
    /// option, at the end of the bytes or at an option that runs past them (as KubeVirt's
    /// library stops there).
    pub fn parse(bytes: &'a [u8]) -> Result<Request<'a>, PacketError> {
        if bytes.len() < HEADER_LEN {
            return Err(PacketError::TooShort(bytes.len()));
        }
        if bytes[HEADER_LEN - MAGIC.len()..HEADER_LEN] != MAGIC {
            return Err(PacketError::NoCookie);
        }
        let msg = borrowed::Message::new(bytes).map_err(|_| PacketError::TooShort(bytes.len()))?;
        if msg.hlen() > CHADDR_LEN {
            return Err(PacketError::BadHardwareLength(msg.hlen()));
        }
        Ok(Request(msg))
    }

    /// dhcproto's view of the message (header fields, raw options).
    pub fn message(&self) -> &borrowed::Message<'a> {
        &self.0
    }

    /// The message type (option 53), when present and one byte long.
    pub fn message_type(&self) -> Option<MessageType> {
        let opt = self
            .0
            .opts()
            .find(|o| o.code() == OptionCode::MessageType)?;
        match opt.data() {
            [t] => Some(MessageType::from(*t)),
            _ => None,
        }
    }

    /// The significant bytes of `chaddr`.
    pub fn client_hardware_address(&self) -> &'a [u8] {
        self.0.chaddr()
    }

    /// The client asked for broadcast replies.
    pub fn wants_broadcast(&self) -> bool {
        self.0.flags().broadcast()
    }
}

/// The wire form of a reply: dhcproto's header, the options in KubeVirt's order, the end
/// option, the padding.
pub fn encode(mut reply: Message) -> Result<Vec<u8>, EncodeError> {
    let options = std::mem::take(reply.opts_mut());
    let mut out = Vec::with_capacity(MIN_REPLY_LEN + 64);
    let mut e = Encoder::new(&mut out);
    // Without options dhcproto writes the header and the cookie only.
    reply.encode(&mut e)?;
    let leading = LEADING.iter().filter_map(|code| options.get(*code));
    let rest = options
        .iter()
        .filter(|(code, _)| !LEADING.contains(code))
        .map(|(_, opt)| opt);
    for opt in leading.chain(rest) {
        let before = e.len_filled();
        opt.encode(&mut e)?;
        // dhcproto writes nothing for an empty value (no name servers, an empty private
        // option); KubeVirt's library writes the code with length 0.
        if e.len_filled() == before {
            e.write_u8(OptionCode::from(opt).into())?;
            e.write_u8(0)?;
        }
    }
    DhcpOption::End.encode(&mut e)?;
    if out.len() < MIN_REPLY_LEN {
        out.resize(MIN_REPLY_LEN, 0);
    }
    Ok(out)
}

/// A message decoded in full, typed options and all.
#[cfg(test)]
pub fn decode(bytes: &[u8]) -> Result<Message, dhcproto::v4::DecodeError> {
    dhcproto::Decodable::decode(&mut dhcproto::Decoder::new(bytes))
}

/// The option codes of a message in wire order (a split option counts once).
#[cfg(test)]
pub fn option_order(bytes: &[u8]) -> Vec<u8> {
    borrowed::Message::new(bytes)
        .map(|m| m.opts().map(|o| u8::from(o.code())).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::v4::{Flags, Opcode};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    /// A client's DISCOVER as dhcproto encodes one.
    fn discover() -> Vec<u8> {
        let mut m = Message::new_with_id(
            0xdead_beef,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &[2, 0, 0, 0, 0, 7],
        );
        m.set_flags(Flags::default().set_broadcast());
        m.opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Discover));
        m.opts_mut().insert(DhcpOption::ParameterRequestList(vec![
            OptionCode::SubnetMask,
            OptionCode::Router,
        ]));
        let mut out = Vec::new();
        m.encode(&mut Encoder::new(&mut out)).unwrap();
        out
    }

    #[test]
    fn a_clients_message_is_read() {
        let wire = discover();
        let req = Request::parse(&wire).unwrap();
        assert_eq!(req.message_type(), Some(MessageType::Discover));
        assert_eq!(req.client_hardware_address(), &[2, 0, 0, 0, 0, 7]);
        assert_eq!(req.message().xid(), 0xdead_beef);
        assert!(req.wants_broadcast());
    }

    #[test]
    fn broken_messages_are_refused() {
        assert_eq!(
            Request::parse(&[0; 10]).unwrap_err(),
            PacketError::TooShort(10)
        );
        assert_eq!(
            Request::parse(&[0; 240]).unwrap_err(),
            PacketError::NoCookie
        );
        let mut wire = discover();
        wire[2] = 17;
        assert_eq!(
            Request::parse(&wire).unwrap_err(),
            PacketError::BadHardwareLength(17)
        );
        // An option running past the end ends the option area (what came before it counts).
        let mut wire = discover();
        wire.truncate(240);
        wire.extend_from_slice(&[53, 1, 3, 12, 9, b'x']);
        let req = Request::parse(&wire).unwrap();
        assert_eq!(req.message_type(), Some(MessageType::Request));
    }

    /// Replies start with type, server id and lease time, end with the end option and are
    /// padded; a long option is split (RFC 3396) and decodes whole.
    #[test]
    fn replies_are_laid_out_as_kubevirts() {
        let mut m = Message::new_with_id(
            7,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::new(10, 0, 2, 2),
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &[2; 6],
        );
        m.set_opcode(Opcode::BootReply);
        let opts = m.opts_mut();
        opts.insert(DhcpOption::InterfaceMtu(1500));
        opts.insert(DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)));
        opts.insert(DhcpOption::AddressLeaseTime(60));
        opts.insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 2, 1)));
        opts.insert(DhcpOption::MessageType(MessageType::Offer));
        let wire = encode(m.clone()).unwrap();
        assert_eq!(wire.len(), MIN_REPLY_LEN);
        assert_eq!(option_order(&wire), [53, 54, 51, 1, 26]);
        let at = HEADER_LEN + 3 + 6 + 6 + 6 + 4;
        assert_eq!(wire[at], 255, "end option after the options");
        assert!(wire[at + 1..].iter().all(|b| *b == 0), "zero padding");
        assert_eq!(decode(&wire).unwrap(), m);

        m.opts_mut()
            .insert(DhcpOption::Unknown(dhcproto::v4::UnknownOption::new(
                OptionCode::from(240),
                vec![7; 300],
            )));
        let wire = encode(m.clone()).unwrap();
        assert_eq!(option_order(&wire), [53, 54, 51, 1, 26, 240]);
        let split = wire[HEADER_LEN..]
            .windows(2)
            .filter(|w| w[0] == 240)
            .count();
        assert!(split >= 2, "a 300-byte option goes out in two parts");
        assert_eq!(decode(&wire).unwrap(), m);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            if let Ok(req) = Request::parse(&bytes) {
                let _ = req.message_type();
                let _ = req.client_hardware_address();
                let _ = req.wants_broadcast();
            }
        }

        #[test]
        fn arbitrary_option_areas_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut wire = discover();
            wire.truncate(240);
            wire.extend_from_slice(&tail);
            let req = Request::parse(&wire).unwrap();
            let _ = req.message_type();
            let _ = req.client_hardware_address();
        }
    }
}
