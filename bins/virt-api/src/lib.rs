//! kvrs virt-api: KubeVirt v1.9.0's admission webhooks, served over HTTPS to the API server.
//!
//! The library is two halves, as quinn-proto and quinn are:
//!
//! - **the decisions** (always built, no IO): [`review`] reads an AdmissionReview and writes
//!   the answer, [`webhooks`] decides it — KubeVirt's mutating and validating webhooks for
//!   VMIs, VMs, migrations, instancetypes and preferences on top of `kvrs-admission` (the same
//!   defaults, rules and messages as `kvrs convert`'s) — and [`handle`] is the whole exchange,
//!   body in, HTTP status and body out. The fuzz target drives exactly that.
//! - [`subresources`]: the aggregated API `subresources.kubevirt.io` (discovery, VM `start`,
//!   `stop`, `restart` decided as KubeVirt v1.9.0 does), served to the aggregator only
//!   ([`auth`]: the front-proxy client certificate and the requestheader settings).
//! - **the shell** (feature `server`, on by default): the HTTPS server with its limits
//!   ([`server`]), the CA and serving certificate kept in a Secret and rotated ([`certs`],
//!   [`cluster`]), the flags and [`run`].

pub mod response;
pub mod review;
pub mod subresources;
pub mod webhooks;

#[cfg(feature = "server")]
pub mod auth;

#[cfg(feature = "server")]
pub mod certs;
#[cfg(feature = "server")]
pub mod cluster;
#[cfg(feature = "server")]
pub mod flags;
#[cfg(feature = "server")]
mod run;
#[cfg(feature = "server")]
pub mod server;

#[cfg(feature = "server")]
pub use flags::Flags;
#[cfg(feature = "server")]
pub use run::run;

use crate::review::{AdmissionRequest, DecodeError, decode, encode};
use crate::webhooks::{Context, Facts, Webhook, admit};

/// The largest AdmissionReview body read: 3 MiB, the API server's own request limit
/// (`--max-request-bytes` is 3 MiB for a JSON object in etcd terms), plus room for the
/// review's envelope and the old object of an UPDATE... within the same bound, as KubeVirt's
/// virt-api relies on the API server never sending more. A larger body is refused with 413
/// before it is read whole.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// An HTTP answer: status code and JSON (or plain-text) body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// `application/json` for an AdmissionReview, `text/plain` otherwise.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// A plain-text error.
    pub fn text(status: u16, message: impl Into<String>) -> Reply {
        let mut body = message.into().into_bytes();
        body.push(b'\n');
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body,
        }
    }
}

/// Reads `body` as an AdmissionReview for `webhook`: the request, or the 400 answer naming
/// what is wrong (KubeVirt answers such a body with a bare 400).
pub fn read_request(body: &[u8]) -> Result<AdmissionRequest, (Reply, DecodeError)> {
    decode(body).map_err(|e| (Reply::text(400, e.to_string()), e))
}

/// The whole exchange for a request already read: `webhook`'s verdict as the AdmissionReview
/// answering it (200).
pub fn answer(
    webhook: Webhook,
    request: &AdmissionRequest,
    ctx: &Context<'_>,
    facts: &Facts,
) -> (Reply, review::Verdict) {
    let verdict = admit(webhook, request, ctx, facts);
    let reply = Reply {
        status: 200,
        content_type: "application/json",
        body: encode(&request.uid, &verdict),
    };
    (reply, verdict)
}

/// Body in, answer out, for a webhook that needs nothing read from the cluster (the fuzz
/// target's entry point; the server reads [`webhooks::lookup`]'s facts in between).
pub fn handle(webhook: Webhook, body: &[u8], ctx: &Context<'_>, facts: &Facts) -> Reply {
    match read_request(body) {
        Ok(request) => answer(webhook, &request, ctx, facts).0,
        Err((reply, _)) => reply,
    }
}
