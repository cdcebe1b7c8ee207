//! The server half of a WebSocket opening handshake (RFC 6455 §4.2), as plain data: the
//! request's method and headers in, the `101 Switching Protocols` headers or the refusal out.
//!
//! hyper performs the HTTP upgrade itself; what is left is checking that the request is a
//! WebSocket one and answering its key. The refusals carry the wording of gorilla/websocket's
//! upgrader, which KubeVirt's handler uses, so a client sees the same reason either way.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha1::{Digest, Sha1};

use super::Answer;

/// KubeVirt's raw stream subprotocol (`subresources.PlainStreamProtocolName`).
pub const PLAIN_STREAM_PROTOCOL: &str = "plain.kubevirt.io";

/// The GUID RFC 6455 appends to the client's key.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// What the `101` answer carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// `Sec-WebSocket-Accept`.
    pub accept: String,
    /// `Sec-WebSocket-Protocol`, when the client offered KubeVirt's.
    pub protocol: Option<&'static str>,
}

/// `Sec-WebSocket-Accept` for the client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(ACCEPT_GUID.as_bytes());
    STANDARD.encode(sha.finalize())
}

/// Whether the comma-separated header values hold `token` (case-insensitively).
fn has_token(values: &[&str], token: &str) -> bool {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn refuse(status: u16, why: &str) -> Answer {
    Answer::text(status, &format!("websocket: {why}"))
}

/// Checks a WebSocket upgrade request: `header(name)` gives every value of a header.
pub fn accept<'h>(method: &str, header: impl Fn(&str) -> Vec<&'h str>) -> Result<Accepted, Answer> {
    const NOT_WS: &str = "the client is not using the websocket protocol";
    if !has_token(&header("connection"), "upgrade") {
        return Err(refuse(
            400,
            &format!("{NOT_WS}: 'upgrade' token not found in 'Connection' header"),
        ));
    }
    if !has_token(&header("upgrade"), "websocket") {
        return Err(refuse(
            400,
            &format!("{NOT_WS}: 'websocket' token not found in 'Upgrade' header"),
        ));
    }
    if method != "GET" {
        return Err(refuse(405, &format!("{NOT_WS}: request method is not GET")));
    }
    if !has_token(&header("sec-websocket-version"), "13") {
        return Err(refuse(
            400,
            "unsupported version: 13 not found in 'Sec-Websocket-Version' header",
        ));
    }
    let key = header("sec-websocket-key")
        .first()
        .map(|k| k.trim())
        .unwrap_or_default();
    if STANDARD.decode(key).map(|k| k.len()) != Ok(16) {
        return Err(refuse(
            400,
            "not a websocket handshake: 'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length",
        ));
    }
    let protocol = has_token(&header("sec-websocket-protocol"), PLAIN_STREAM_PROTOCOL)
        .then_some(PLAIN_STREAM_PROTOCOL);
    Ok(Accepted {
        accept: accept_key(key),
        protocol,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Vec<&'static str> {
        move |name| {
            pairs
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
                .collect()
        }
    }

    const GOOD: &[(&str, &str)] = &[
        ("Connection", "keep-alive, Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Protocol", "plain.kubevirt.io"),
    ];

    #[test]
    fn the_rfc_example_key_is_answered() {
        assert_eq!(
            accept("GET", headers(GOOD)).unwrap(),
            Accepted {
                accept: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into(),
                protocol: Some(PLAIN_STREAM_PROTOCOL)
            }
        );
        const NO_PROTOCOL: &[(&str, &str)] = &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        assert_eq!(accept("GET", headers(NO_PROTOCOL)).unwrap().protocol, None);
    }

    #[test]
    fn requests_that_are_not_websocket_handshakes_are_refused_as_gorilla_refuses_them() {
        let plain: &[(&str, &str)] = &[];
        let e = accept("GET", headers(plain)).unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(
            String::from_utf8_lossy(&e.body),
            "websocket: the client is not using the websocket protocol: 'upgrade' token not found in 'Connection' header"
        );
        assert_eq!(accept("PUT", headers(GOOD)).unwrap_err().status, 405);
        let old: &[(&str, &str)] = &[
            ("Connection", "Upgrade"),
            ("Upgrade", "WebSocket"),
            ("Sec-WebSocket-Version", "8"),
        ];
        assert!(
            String::from_utf8_lossy(&accept("GET", headers(old)).unwrap_err().body)
                .contains("unsupported version")
        );
        let short_key: &[(&str, &str)] = &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "c2hvcnQ="),
        ];
        assert!(
            String::from_utf8_lossy(&accept("GET", headers(short_key)).unwrap_err().body)
                .contains("'Sec-WebSocket-Key' header must be Base64")
        );
    }
}
