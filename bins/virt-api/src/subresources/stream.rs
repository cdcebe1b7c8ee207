//! The VMI `console` and `vnc` streams: the client's connection upgraded to a WebSocket and
//! piped, byte for byte, to the WebSocket of the VMI's virt-handler (KubeVirt's raw streamer),
//! once [`super::console`]'s checks pass.
//!
//! Memory is bounded by two fixed copy buffers per stream; a slow reader on either side slows
//! the other down. The stream ends, both connections closed, when either side ends, as
//! KubeVirt's streamer cancels both copies on the first result.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    CONNECTION, HeaderValue, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_PROTOCOL, UPGRADE,
};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tracing::{info, warn};

use super::handler::{PLAIN_STREAM_PROTOCOL, StreamError};
use super::serve::{Handlers, api, get, handler_pods};
use super::{ApiError, console, vmi};
use crate::auth::User;

/// The GUID RFC 6455 appends to the client's key.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key.as_bytes());
    ctx.update(ACCEPT_GUID.as_bytes());
    STANDARD.encode(ctx.finish())
}

/// What a `101` answer to the client carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// `Sec-WebSocket-Accept`.
    pub accept: String,
    /// `Sec-WebSocket-Protocol`, when the client offered KubeVirt's.
    pub protocol: Option<&'static str>,
}

fn has_token(values: &[&str], token: &str) -> bool {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Checks the client's WebSocket upgrade request (`header(name)`: every value of a header);
/// a refusal is [`console::check_handshake`]'s 400 with gorilla/websocket's reason, as
/// KubeVirt's streamer answers it.
pub fn accept_client<'h>(
    method: &str,
    header: impl Fn(&str) -> Vec<&'h str>,
) -> Result<Accepted, ApiError> {
    console::check_handshake(method, &header)?;
    let key = header("sec-websocket-key")
        .first()
        .map(|k| k.trim())
        .unwrap_or_default();
    Ok(Accepted {
        accept: accept_key(key),
        protocol: has_token(&header("sec-websocket-protocol"), PLAIN_STREAM_PROTOCOL)
            .then_some(PLAIN_STREAM_PROTOCOL),
    })
}

/// Serves `GET .../virtualmachineinstances/{name}/console` (or `vnc`): KubeVirt's refusal, or
/// `101` with the pipe to the handler started once hyper hands the client's connection over.
pub async fn open(
    client: &kube::Client,
    handlers: &Handlers,
    namespace: &str,
    name: &str,
    stream: console::Stream,
    mut req: Request<Incoming>,
    user: &User,
) -> Result<Response<Full<Bytes>>, ApiError> {
    let key = format!("{namespace}/{name}");
    let headers = req.headers();
    let accepted = accept_client(req.method().as_str(), |h| {
        headers
            .get_all(h)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    })?;
    let vmis = api(
        client,
        namespace,
        "VirtualMachineInstance",
        "virtualmachineinstances",
    );
    let vmi = get(&vmis, name)
        .await?
        .ok_or_else(|| ApiError::not_found("virtualmachineinstance", name))?;
    if let Err(e) = stream.validate(&vmi) {
        info!(vmi = %key, user = %user.name, ?stream, "Can't establish the connection: {}", e.message);
        return Err(e);
    }
    let node = vmi["status"]["nodeName"].as_str().unwrap_or_default();
    let pods = handler_pods(client, &handlers.namespace, node).await?;
    let address = vmi::handler_address(&vmi, &pods, handlers.port)?;
    let path = stream.handler_path(namespace, name);
    let upstream = match handlers.client.open_stream(&address, &path).await {
        Ok(u) => u,
        Err(StreamError::Refused(r)) => {
            let e = console::refused(r.status, &r.content_type, &r.body);
            warn!(vmi = %key, user = %user.name, ?stream, "the handler refused the stream: {}", e.message);
            return Err(e);
        }
        Err(StreamError::Handler(e)) => {
            warn!(vmi = %key, user = %user.name, ?stream, reason = e.label(), "the handler's stream: {e}");
            return Err(ApiError::internal(&e.to_string()));
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let user = user.name.clone();
    tokio::spawn(async move {
        let downstream = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => return warn!(vmi = %key, "the client's connection was not upgraded: {e}"),
        };
        info!(vmi = %key, %user, ?stream, "connected");
        let ended = pipe(TokioIo::new(downstream), TokioIo::new(upstream)).await;
        info!(vmi = %key, %user, ?stream, "closed: {ended}");
    });
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accepted.accept) {
        h.insert(SEC_WEBSOCKET_ACCEPT, v);
    }
    if let Some(p) = accepted.protocol {
        h.insert(SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(p));
    }
    Ok(r)
}

/// Copies both ways until either direction ends; says which did and how.
async fn pipe<A, B>(client: A, handler: B) -> String
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut client_rd, mut client_wr) = tokio::io::split(client);
    let (mut handler_rd, mut handler_wr) = tokio::io::split(handler);
    let outcome = |side: &str, r: std::io::Result<u64>| match r {
        Ok(n) => format!("{side} ended after {n} bytes"),
        Err(e) => format!("{side}: {e}"),
    };
    tokio::select! {
        r = tokio::io::copy(&mut client_rd, &mut handler_wr) => outcome("the client", r),
        r = tokio::io::copy(&mut handler_rd, &mut client_wr) => outcome("virt-handler", r),
    }
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

    #[test]
    fn the_client_handshake_is_checked_and_answered() {
        const GOOD: &[(&str, &str)] = &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Protocol", "plain.kubevirt.io"),
        ];
        assert_eq!(
            accept_client("GET", headers(GOOD)).unwrap(),
            Accepted {
                accept: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into(),
                protocol: Some(PLAIN_STREAM_PROTOCOL)
            }
        );
        const PLAIN: &[(&str, &str)] = &[("Accept", "application/json")];
        let e = accept_client("GET", headers(PLAIN)).unwrap_err();
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert_eq!(
            e.message,
            "websocket: the client is not using the websocket protocol: 'upgrade' token not found in 'Connection' header"
        );
        assert!(
            accept_client("POST", headers(GOOD))
                .unwrap_err()
                .message
                .ends_with("request method is not GET")
        );
    }

    #[tokio::test]
    async fn the_pipe_carries_bytes_both_ways_and_ends_with_either_side() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, mut client_far) = tokio::io::duplex(1024);
        let (handler, mut handler_far) = tokio::io::duplex(1024);
        let piped = tokio::spawn(pipe(client, handler));
        client_far.write_all(b"typed").await.unwrap();
        let mut got = [0u8; 5];
        handler_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"typed");
        handler_far.write_all(b"shown").await.unwrap();
        client_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"shown");
        drop(handler_far);
        let ended = piped.await.unwrap();
        assert_eq!(ended, "virt-handler ended after 5 bytes");
    }
}
