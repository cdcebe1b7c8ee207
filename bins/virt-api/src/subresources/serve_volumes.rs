//! `addvolume` / `removevolume` against the cluster: the VM or VMI read, [`super::volumes`]'s
//! patch sent (dry run honoured), KubeVirt's answers (202, or a `Status`).

use kube::api::PatchParams;
use serde_json::Value;
use tracing::info;

use super::serve::{Answer, api};
use super::vm::{PatchOp, Target};
use super::volumes::{self, Gates, VolumeRequest};
use super::{ApiError, Route};
use crate::auth::User;

/// Serves `route` when it is a VM's or a VMI's `addvolume` / `removevolume`; `None` otherwise.
pub async fn volume_request(
    client: &kube::Client,
    config: &kvrs_admission::ClusterConfig,
    route: &Route,
    method: &str,
    body: &[u8],
    user: &User,
) -> Option<Result<Answer, ApiError>> {
    let (namespace, name, subresource, on_vm) = match route {
        Route::Vm {
            namespace,
            name,
            subresource,
        } => (namespace, name, subresource, true),
        Route::Vmi {
            namespace,
            name,
            subresource,
        } => (namespace, name, subresource, false),
        _ => return None,
    };
    let gates = Gates::of(config);
    let request = match VolumeRequest::read(subresource, method, body, gates)? {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    let key = format!("{namespace}/{name}");
    let outcome = if on_vm {
        let vms = api(client, namespace, "VirtualMachine", "virtualmachines");
        match fetch(&vms, name, "virtualmachine", "vm").await {
            Ok(vm) => match volumes::vm_patch(&vm, &request, gates) {
                Ok(op) => send(&vms, name, &op, request.dry_run()).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    } else {
        let vmis = api(
            client,
            namespace,
            "VirtualMachineInstance",
            "virtualmachineinstances",
        );
        match fetch(&vmis, name, "virtualmachineinstance", "vmi").await {
            Ok(vmi) => match volumes::vmi_patch(&vmi, &request, gates) {
                Ok(op) => send(&vmis, name, &op, request.dry_run()).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    };
    match &outcome {
        Ok(()) => {
            info!(object = %key, user = %user.name, dry_run = request.dry_run(), "{subresource}")
        }
        Err(e) => {
            info!(object = %key, user = %user.name, code = e.code, "{subresource} refused: {}", e.message)
        }
    }
    Some(outcome.map(|()| (202, None)))
}

/// KubeVirt's `fetchVirtualMachine` / `FetchVirtualMachineInstance`: 404 when absent, 500
/// `unable to retrieve vm [NAME]` when the read fails.
async fn fetch(
    api: &kube::Api<kube::core::DynamicObject>,
    name: &str,
    resource: &'static str,
    short: &str,
) -> Result<Value, ApiError> {
    match api.get_opt(name).await {
        Ok(Some(o)) => serde_json::to_value(o).map_err(|e| ApiError::internal(&e.to_string())),
        Ok(None) => Err(ApiError::not_found(resource, name)),
        Err(e) => Err(ApiError::internal(&format!(
            "unable to retrieve {short} [{name}]: {e}"
        ))),
    }
}

async fn send(
    api: &kube::Api<kube::core::DynamicObject>,
    name: &str,
    op: &PatchOp,
    dry_run: bool,
) -> Result<(), ApiError> {
    let params = PatchParams {
        dry_run,
        ..Default::default()
    };
    // Go-encoded bytes, so the `test` of a string holding `>` or `&` matches what is stored.
    let sub = match op.target {
        Target::VmStatus => Some("status"),
        Target::Vm | Target::Vmi => None,
    };
    let result =
        kvrs_runtime::kube::go_patch::send_json_patch(api, name, sub, &params, &op.patch).await;
    result.map(|_| ()).map_err(|e| match e {
        kube::Error::Api(s) => volumes::patch_failure(op.target, s.code, &s.message),
        other => volumes::patch_failure(op.target, 500, &other.to_string()),
    })
}
