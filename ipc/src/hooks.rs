//! The launcher's client of KubeVirt's hook sidecars (`kubevirt.hooks.*`): the `Info` handshake
//! and the `Callbacks` service in whichever version the sidecar chose to serve.
//!
//! A hook sidecar runs in the launcher's pod and serves gRPC on a Unix socket in the pod's hooks
//! directory. The three `Callbacks` versions carry the same messages under different packages,
//! so one client dispatches on [`CallbacksVersion`] and callers never see the generated types of
//! a particular version. Every call runs under a client-side deadline as well as the gRPC
//! `grpc-timeout` header: a sidecar that accepted the connection and then hangs costs the
//! launcher the deadline, never more.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::transport::Channel;

use crate::error::IpcError;
use crate::proto::hooks::{info, v1alpha1, v1alpha2, v1alpha3};
use crate::transport;

/// The hook point called with the domain XML just before the launcher defines it.
pub const ON_DEFINE_DOMAIN: &str = "OnDefineDomain";
/// The hook point called with the cloud-init data before the launcher writes its ISO.
pub const PRE_CLOUD_INIT_ISO: &str = "PreCloudInitIso";
/// The hook point called when the launcher ends, so the sidecar can exit too.
pub const SHUTDOWN: &str = "Shutdown";

/// A version of the hook sidecars' `Callbacks` service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CallbacksVersion {
    /// `kubevirt.hooks.v1alpha1`: OnDefineDomain.
    V1alpha1,
    /// `kubevirt.hooks.v1alpha2`: adds PreCloudInitIso.
    V1alpha2,
    /// `kubevirt.hooks.v1alpha3`: adds Shutdown.
    V1alpha3,
}

impl CallbacksVersion {
    /// Every version this client speaks, newest first: the order a sidecar's offer is matched in.
    pub const NEWEST_FIRST: [CallbacksVersion; 3] = [
        CallbacksVersion::V1alpha3,
        CallbacksVersion::V1alpha2,
        CallbacksVersion::V1alpha1,
    ];

    /// The name a sidecar lists in `InfoResult.versions`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallbacksVersion::V1alpha1 => "v1alpha1",
            CallbacksVersion::V1alpha2 => "v1alpha2",
            CallbacksVersion::V1alpha3 => "v1alpha3",
        }
    }

    /// Whether this version's service has the hook point's RPC.
    pub fn serves(self, hook_point: &str) -> bool {
        match hook_point {
            ON_DEFINE_DOMAIN => true,
            PRE_CLOUD_INIT_ISO => self >= CallbacksVersion::V1alpha2,
            SHUTDOWN => self >= CallbacksVersion::V1alpha3,
            _ => false,
        }
    }
}

impl std::fmt::Display for CallbacksVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a sidecar said about itself in the `Info` handshake.
pub type SidecarInfo = info::InfoResult;

/// The cloud-init data a `PreCloudInitIso` call carries, each part as JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CloudInitPayload {
    /// KubeVirt's `CloudInitData` (data source, metadata, user, network and devices data).
    pub cloud_init_data: Vec<u8>,
    /// The user and network data alone, as a `CloudInitNoCloudSource` (for older sidecars).
    pub cloud_init_no_cloud_source: Vec<u8>,
}

/// Why a call to a sidecar failed, before any interpretation of what it answered.
#[derive(Debug, thiserror::Error)]
pub enum HookCallError {
    /// The socket could not be dialled.
    #[error(transparent)]
    Connect(#[from] IpcError),
    /// The sidecar answered with a gRPC error (or the connection broke during the call).
    #[error("gRPC status {}: {}", status.code(), status.message())]
    Status {
        /// `Info`, `OnDefineDomain`, `PreCloudInitIso` or `Shutdown`.
        rpc: &'static str,
        /// What tonic reported.
        status: Box<tonic::Status>,
    },
    /// No answer within the deadline.
    #[error("no answer within {after:?}")]
    Timeout {
        /// The RPC called.
        rpc: &'static str,
        /// The deadline.
        after: Duration,
    },
    /// The RPC is not part of the version the sidecar serves (a v1alpha1 sidecar has no
    /// PreCloudInitIso).
    #[error("{rpc} is not part of Callbacks {version}")]
    NotInVersion {
        /// The RPC asked for.
        rpc: &'static str,
        /// The version the sidecar serves.
        version: CallbacksVersion,
    },
}

/// One connection to one hook sidecar's socket.
#[derive(Clone, Debug)]
pub struct HookClient {
    socket: PathBuf,
    channel: Channel,
}

impl HookClient {
    /// Dials the sidecar's socket; the connection is made here, within `connect_timeout`.
    pub async fn connect(socket: &Path, connect_timeout: Duration) -> Result<Self, HookCallError> {
        // `dial` bounds connect(2); this bounds the whole of it, HTTP/2 set-up included.
        let channel =
            tokio::time::timeout(connect_timeout, transport::dial(socket, connect_timeout))
                .await
                .map_err(|_| IpcError::ConnectTimeout {
                    path: socket.to_path_buf(),
                    after: connect_timeout,
                })??;
        Ok(HookClient {
            socket: socket.to_path_buf(),
            channel,
        })
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `Info.Info`: the sidecar's name, hook points and `Callbacks` versions.
    pub async fn info(&self, timeout: Duration) -> Result<SidecarInfo, HookCallError> {
        let mut client = info::info_client::InfoClient::new(self.channel.clone());
        deadline("Info", timeout, async move {
            client
                .info(request(info::InfoParams {}, timeout))
                .await
                .map(tonic::Response::into_inner)
        })
        .await
    }

    /// `Callbacks.OnDefineDomain`: sends the domain XML and the VMI JSON, returns the domain XML
    /// the sidecar wants defined instead (unchecked: the caller validates it).
    pub async fn on_define_domain(
        &self,
        version: CallbacksVersion,
        domain_xml: Vec<u8>,
        vmi_json: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, HookCallError> {
        let channel = self.channel.clone();
        deadline(ON_DEFINE_DOMAIN, timeout, async move {
            match version {
                CallbacksVersion::V1alpha1 => {
                    let mut c = v1alpha1::callbacks_client::CallbacksClient::new(channel);
                    let params = v1alpha1::OnDefineDomainParams {
                        domain_xml,
                        vmi: vmi_json,
                    };
                    c.on_define_domain(request(params, timeout))
                        .await
                        .map(|r| r.into_inner().domain_xml)
                }
                CallbacksVersion::V1alpha2 => {
                    let mut c = v1alpha2::callbacks_client::CallbacksClient::new(channel);
                    let params = v1alpha2::OnDefineDomainParams {
                        domain_xml,
                        vmi: vmi_json,
                    };
                    c.on_define_domain(request(params, timeout))
                        .await
                        .map(|r| r.into_inner().domain_xml)
                }
                CallbacksVersion::V1alpha3 => {
                    let mut c = v1alpha3::callbacks_client::CallbacksClient::new(channel);
                    let params = v1alpha3::OnDefineDomainParams {
                        domain_xml,
                        vmi: vmi_json,
                    };
                    c.on_define_domain(request(params, timeout))
                        .await
                        .map(|r| r.into_inner().domain_xml)
                }
            }
        })
        .await
    }

    /// `Callbacks.PreCloudInitIso`: sends the cloud-init data and the VMI JSON, returns what the
    /// sidecar answered (both fields, unchecked: the caller picks and validates).
    pub async fn pre_cloud_init_iso(
        &self,
        version: CallbacksVersion,
        payload: CloudInitPayload,
        vmi_json: Vec<u8>,
        timeout: Duration,
    ) -> Result<CloudInitPayload, HookCallError> {
        let channel = self.channel.clone();
        let rpc = PRE_CLOUD_INIT_ISO;
        match version {
            CallbacksVersion::V1alpha1 => Err(HookCallError::NotInVersion { rpc, version }),
            CallbacksVersion::V1alpha2 => {
                deadline(rpc, timeout, async move {
                    let mut c = v1alpha2::callbacks_client::CallbacksClient::new(channel);
                    let params = v1alpha2::PreCloudInitIsoParams {
                        cloud_init_no_cloud_source: payload.cloud_init_no_cloud_source,
                        vmi: vmi_json,
                        cloud_init_data: payload.cloud_init_data,
                    };
                    c.pre_cloud_init_iso(request(params, timeout))
                        .await
                        .map(|r| {
                            let r = r.into_inner();
                            CloudInitPayload {
                                cloud_init_data: r.cloud_init_data,
                                cloud_init_no_cloud_source: r.cloud_init_no_cloud_source,
                            }
                        })
                })
                .await
            }
            CallbacksVersion::V1alpha3 => {
                deadline(rpc, timeout, async move {
                    let mut c = v1alpha3::callbacks_client::CallbacksClient::new(channel);
                    let params = v1alpha3::PreCloudInitIsoParams {
                        cloud_init_no_cloud_source: payload.cloud_init_no_cloud_source,
                        vmi: vmi_json,
                        cloud_init_data: payload.cloud_init_data,
                    };
                    c.pre_cloud_init_iso(request(params, timeout))
                        .await
                        .map(|r| {
                            let r = r.into_inner();
                            CloudInitPayload {
                                cloud_init_data: r.cloud_init_data,
                                cloud_init_no_cloud_source: r.cloud_init_no_cloud_source,
                            }
                        })
                })
                .await
            }
        }
    }

    /// `Callbacks.Shutdown` (v1alpha3 only): tells the sidecar the launcher is ending.
    pub async fn shutdown(
        &self,
        version: CallbacksVersion,
        timeout: Duration,
    ) -> Result<(), HookCallError> {
        if version != CallbacksVersion::V1alpha3 {
            return Err(HookCallError::NotInVersion {
                rpc: SHUTDOWN,
                version,
            });
        }
        let mut c = v1alpha3::callbacks_client::CallbacksClient::new(self.channel.clone());
        deadline(SHUTDOWN, timeout, async move {
            c.shutdown(request(v1alpha3::ShutdownParams {}, timeout))
                .await
                .map(|_| ())
        })
        .await
    }
}

/// A request carrying the deadline in its `grpc-timeout` header, so the sidecar can give up too.
fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

/// Runs a call under a client-side deadline (the header alone trusts the peer to honour it).
async fn deadline<T>(
    rpc: &'static str,
    after: Duration,
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, HookCallError> {
    match tokio::time::timeout(after, call).await {
        Err(_) => Err(HookCallError::Timeout { rpc, after }),
        // tonic's channel enforces the `grpc-timeout` it sent as a cancellation.
        Ok(Err(status))
            if status.code() == tonic::Code::DeadlineExceeded
                || (status.code() == tonic::Code::Cancelled
                    && status.message().contains("Timeout expired")) =>
        {
            Err(HookCallError::Timeout { rpc, after })
        }
        Ok(Err(status)) => Err(HookCallError::Status {
            rpc,
            status: Box::new(status),
        }),
        Ok(Ok(v)) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_serve_kubevirts_hook_points() {
        use CallbacksVersion::*;
        assert!(V1alpha1.serves(ON_DEFINE_DOMAIN));
        assert!(!V1alpha1.serves(PRE_CLOUD_INIT_ISO));
        assert!(V1alpha2.serves(PRE_CLOUD_INIT_ISO));
        assert!(!V1alpha2.serves(SHUTDOWN));
        assert!(V1alpha3.serves(SHUTDOWN));
        assert!(!V1alpha3.serves("OnStart"));
        assert_eq!(
            CallbacksVersion::NEWEST_FIRST.map(CallbacksVersion::as_str),
            ["v1alpha3", "v1alpha2", "v1alpha1"]
        );
    }
}
