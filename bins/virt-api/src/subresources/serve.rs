//! The subresource requests against the cluster: the VM and its VMI read, [`super::vm`]'s
//! decision written as JSON patches (never a full update), KubeVirt's answers (202 on success,
//! a `Status` otherwise).

use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;
use tracing::info;

use super::vm::{self, Plan, RestartOptions, StartOptions, StopOptions, Target};
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

/// KubeVirt's `decodeBody`: an empty body is the defaults.
fn decode<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(&format!(
            "Can not unmarshal Request body to struct, error: {e}"
        ))
    })
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
    if !matches!(subresource.as_str(), "start" | "stop" | "restart") {
        return Err(not_served(route));
    }
    if method != "PUT" {
        return Err(ApiError::status(
            405,
            "MethodNotAllowed",
            &format!("{subresource} is served for PUT only"),
        ));
    }
    // KubeVirt reads stop's and restart's options before the VM (a bad body is a 400 even
    // for a VM that does not exist); start's after.
    let stop_options: Option<StopOptions> = match subresource.as_str() {
        "stop" => Some(decode(body)?),
        _ => None,
    };
    let restart_options: Option<RestartOptions> = match subresource.as_str() {
        "restart" => {
            let o = decode(body)?;
            vm::check_restart_options(&o)?;
            Some(o)
        }
        _ => None,
    };
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
    let (plan, dry_run) = match (stop_options, restart_options) {
        (Some(o), _) => (vm::stop(&vm, vmi.as_ref(), &o)?, !o.dry_run.is_empty()),
        (_, Some(o)) => (vm::restart(&vm, vmi.as_ref(), &o)?, !o.dry_run.is_empty()),
        (None, None) => {
            let o: StartOptions = decode(body)?;
            (vm::start(&vm, vmi.as_ref(), &o)?, !o.dry_run.is_empty())
        }
    };
    apply(&vms, &vmis, name, &plan, dry_run).await?;
    info!(vm = %format!("{namespace}/{name}"), user = %user.name, dry_run, "{subresource}");
    Ok((202, None))
}

fn not_served(route: &Route) -> ApiError {
    let sub = match route {
        Route::Vm { subresource, .. } | Route::Vmi { subresource, .. } => subresource.as_str(),
        _ => "",
    };
    ApiError::status(
        501,
        "NotImplemented",
        &format!("the {sub} subresource is not served by kvrs yet"),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_body_is_the_defaults_and_garbage_is_a_400() {
        assert_eq!(decode::<StopOptions>(b"").unwrap(), StopOptions::default());
        assert_eq!(
            decode::<StopOptions>(br#"{"gracePeriod": 0, "dryRun": ["All"]}"#).unwrap(),
            StopOptions {
                grace_period: Some(0),
                dry_run: vec!["All".into()]
            }
        );
        let e = decode::<StartOptions>(b"{nope").unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            e.message
                .starts_with("Can not unmarshal Request body to struct, error: "),
            "{}",
            e.message
        );
    }
}
