//! The subresource requests against the cluster: the VM and its VMI read, [`super::vm`]'s
//! decision written as JSON patches (never a full update), KubeVirt's answers (202 on success,
//! a `Status` otherwise).

use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;
use tracing::info;

use super::vm::{self, Plan, Target};
use super::{ApiError, Route};
use crate::auth::User;

/// KubeVirt's `jsonpatchTestErr`: a failed `test` precondition.
const JSONPATCH_TEST_ERR: &str = "jsonpatch test operation does not apply";

/// An answer: status and JSON body (`None`: empty).
pub type Answer = (u16, Option<Value>);

fn api(client: &kube::Client, namespace: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", kind);
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

async fn get(api: &Api<DynamicObject>, name: &str) -> Result<Option<Value>, ApiError> {
    match api.get_opt(name).await {
        Ok(o) => Ok(o.and_then(|o| serde_json::to_value(o).ok())),
        Err(e) => Err(ApiError::internal(&format!(
            "unable to retrieve {name}: {e}"
        ))),
    }
}

/// Serves a VM route (`PUT` start / stop / restart); the rest of KubeVirt's subresources
/// answer 501 until virt-handler's server exists.
pub async fn vm_request(
    client: &kube::Client,
    route: &Route,
    method: &str,
    body: &[u8],
    user: &User,
) -> Result<Answer, ApiError> {
    let Route::Vm {
        namespace,
        name,
        subresource,
    } = route
    else {
        return Err(not_served(route));
    };
    let request = vm::Request::read(subresource, method, body)?;
    let vms = api(client, namespace, "VirtualMachine", "virtualmachines");
    let vmis = api(
        client,
        namespace,
        "VirtualMachineInstance",
        "virtualmachineinstances",
    );
    let vm = get(&vms, name)
        .await?
        .ok_or_else(|| ApiError::not_found("virtualmachine", name))?;
    let vmi = get(&vmis, name).await?;
    let (plan, dry_run) = request.decide(&vm, vmi.as_ref(), body)?;
    apply(&vms, &vmis, name, &plan, dry_run).await?;
    info!(vm = %format!("{namespace}/{name}"), user = %user.name, dry_run, "{subresource}");
    Ok((202, None))
}

fn not_served(route: &Route) -> ApiError {
    match route {
        Route::Vm { subresource, .. } | Route::Vmi { subresource, .. } => {
            vm::not_served(subresource)
        }
        _ => vm::not_served(""),
    }
}

async fn apply(
    vms: &Api<DynamicObject>,
    vmis: &Api<DynamicObject>,
    name: &str,
    plan: &Plan,
    dry_run: bool,
) -> Result<(), ApiError> {
    for (i, op) in plan.patches.iter().enumerate() {
        if let Err(e) = patch(vms, vmis, name, op, dry_run).await {
            if i > 0
                && let Some(back) = &plan.rollback
                && let Err(r) = patch(vms, vmis, name, back, dry_run).await
            {
                tracing::error!(vmi = name, "rolling back the grace period: {}", r.message);
            }
            return Err(e);
        }
    }
    Ok(())
}

async fn patch(
    vms: &Api<DynamicObject>,
    vmis: &Api<DynamicObject>,
    name: &str,
    op: &vm::PatchOp,
    dry_run: bool,
) -> Result<(), ApiError> {
    let patch: json_patch::Patch =
        serde_json::from_value(op.patch.clone()).map_err(|e| ApiError::internal(&e.to_string()))?;
    let params = PatchParams {
        dry_run,
        ..Default::default()
    };
    let p = Patch::<()>::Json(patch);
    let result = match op.target {
        Target::Vm => vms.patch(name, &params, &p).await,
        Target::VmStatus => vms.patch_status(name, &params, &p).await,
        Target::Vmi => vmis.patch(name, &params, &p).await,
    };
    result.map(|_| ()).map_err(|e| {
        let text = e.to_string();
        if text.contains(JSONPATCH_TEST_ERR) || matches!(&e, kube::Error::Api(s) if s.code == 409) {
            ApiError::conflict(name, &text)
        } else {
            ApiError::internal(&text)
        }
    })
}
