//! The subresource requests against the cluster: the VM and its VMI read, [`super::vm`]'s
//! decision written as JSON patches (never a full update), KubeVirt's answers (202 on success,
//! a `Status` otherwise); `migrate`'s VirtualMachineInstanceMigration created
//! ([`super::vm_migrate`]); `expand-spec` and `expand-vm-spec` answered with the VM expanded
//! over the instancetype, preference and revisions read here ([`super::expand`]); the VMI
//! requests forwarded to the VMI's virt-handler ([`vmi_request`]).

use kube::api::{Api, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;
use tracing::info;

use super::vm::{self, Plan, Target};
use super::{ApiError, Route, VmCall};
use super::{expand, vm_migrate, vmi};
use crate::auth::User;

/// KubeVirt's `jsonpatchTestErr`: a failed `test` precondition.
const JSONPATCH_TEST_ERR: &str = "jsonpatch test operation does not apply";

/// An answer: status and JSON body (`None`: empty).
pub type Answer = (u16, Option<Value>);

pub(super) fn api(
    client: &kube::Client,
    namespace: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", kind);
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

pub(super) async fn get(api: &Api<DynamicObject>, name: &str) -> Result<Option<Value>, ApiError> {
    match api.get_opt(name).await {
        Ok(o) => Ok(o.and_then(|o| serde_json::to_value(o).ok())),
        Err(e) => Err(ApiError::internal(&format!(
            "unable to retrieve {name}: {e}"
        ))),
    }
}

/// Serves a VM route (`PUT` start / stop / restart / migrate, `GET` expand-spec), the VM and VMI
/// `addvolume` / `removevolume` ([`super::serve_volumes`]) and the namespace's
/// `PUT expand-vm-spec`; the other VM subresources answer 501.
pub async fn vm_request(
    client: &kube::Client,
    config: &kvrs_admission::ClusterConfig,
    route: &Route,
    method: &str,
    body: &[u8],
    user: &User,
) -> Result<Answer, ApiError> {
    if let Route::ExpandVmSpec { namespace } = route {
        super::check_expand_vm_spec_method(method)?;
        let vm = expand::read_sent_vm(namespace, body)?;
        let expanded = expand_vm(client, config, vm)
            .await
            .map_err(|e| ApiError::bad_request(&e))?;
        return Ok((200, Some(expanded)));
    }
    if let Some(answer) =
        super::serve_volumes::volume_request(client, config, route, method, body, user).await
    {
        return answer;
    }
    let Route::Vm {
        namespace,
        name,
        subresource,
    } = route
    else {
        return Err(not_served(route));
    };
    let call = VmCall::read(subresource, method, body)?;
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
    let request = match call {
        VmCall::Lifecycle(r) => r,
        VmCall::ExpandSpec => {
            let expanded = expand_vm(client, config, vm)
                .await
                .map_err(|e| ApiError::internal(&e))?;
            return Ok((200, Some(expanded)));
        }
        VmCall::Migrate(options) => {
            let vmi = get(&vmis, name).await?;
            let migration = vm_migrate::migration(name, vmi.as_ref(), &options)?;
            let created = create_migration(client, namespace, migration, options.dry_run()).await?;
            info!(vm = %format!("{namespace}/{name}"), user = %user.name, dry_run = options.dry_run(),
                migration = %created, "migrate");
            return Ok((202, None));
        }
    };
    let vmi = get(&vmis, name).await?;
    let (plan, dry_run) = request.decide(&vm, vmi.as_ref(), body)?;
    apply(&vms, &vmis, name, &plan, dry_run).await?;
    info!(vm = %format!("{namespace}/{name}"), user = %user.name, dry_run, "{subresource}");
    Ok((202, None))
}

/// The migration created (or, for a dry run, validated); its name, as the server chose it.
async fn create_migration(
    client: &kube::Client,
    namespace: &str,
    migration: Value,
    dry_run: bool,
) -> Result<String, ApiError> {
    let migrations = api(
        client,
        namespace,
        "VirtualMachineInstanceMigration",
        "virtualmachineinstancemigrations",
    );
    let object: DynamicObject = serde_json::from_value(migration)
        .map_err(|e| vm_migrate::create_failure(&e.to_string()))?;
    let params = PostParams {
        dry_run,
        ..Default::default()
    };
    let created = migrations
        .create(&params, &object)
        .await
        .map_err(|e| vm_migrate::create_failure(&e.to_string()))?;
    Ok(created.metadata.name.unwrap_or_default())
}

/// KubeVirt's `Expand` over the objects the VM references, read from the cluster (a missing
/// one is left for the expansion to name).
async fn expand_vm(
    client: &kube::Client,
    config: &kvrs_admission::ClusterConfig,
    vm: Value,
) -> Result<Value, String> {
    let mut found = Vec::new();
    for r in expand::references(&vm) {
        let gvk = GroupVersionKind::gvk(r.group, r.version, r.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, r.plural);
        let api: Api<DynamicObject> = match &r.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        match api.get_opt(&r.name).await {
            Ok(Some(o)) => found.push(serde_json::to_value(o).map_err(|e| e.to_string())?),
            Ok(None) => {}
            Err(e) => return Err(format!("unable to retrieve {} {}: {e}", r.plural, r.name)),
        }
    }
    expand::expand(vm, found, config)
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
    let params = PatchParams {
        dry_run,
        ..Default::default()
    };
    // Go-encoded bytes, so a `test` of a string holding `>` or `&` matches what is stored.
    let (api, sub) = match op.target {
        Target::Vm => (vms, None),
        Target::VmStatus => (vms, Some("status")),
        Target::Vmi => (vmis, None),
    };
    let result =
        kvrs_runtime::kube::go_patch::send_json_patch(api, name, sub, &params, &op.patch).await;
    result.map(|_| ()).map_err(|e| {
        let text = e.to_string();
        if text.contains(JSONPATCH_TEST_ERR) || matches!(&e, kube::Error::Api(s) if s.code == 409) {
            ApiError::conflict(name, &text)
        } else {
            ApiError::internal(&text)
        }
    })
}

/// Where virt-handler runs and how virt-api reaches it.
pub struct Handlers {
    /// The mTLS client.
    pub client: std::sync::Arc<super::handler::HandlerClient>,
    /// virt-handler's namespace (KubeVirt's install namespace).
    pub namespace: String,
    /// Its server port (KubeVirt's `consoleServerPort`, 8186).
    pub port: u16,
}

/// A VMI route's answer: status, content type and body (KubeVirt answers a `GET` action's
/// failure as plain text).
pub type VmiAnswer = (u16, &'static str, Vec<u8>);

fn status_answer(e: &ApiError) -> VmiAnswer {
    (
        e.code,
        "application/json",
        serde_json::to_vec(&e.body()).unwrap_or_default(),
    )
}

/// Serves a VMI route: `None` when it is not one kvrs forwards (the caller answers 501).
pub async fn vmi_request(
    client: &kube::Client,
    handlers: &Handlers,
    route: &Route,
    method: &str,
    body: &[u8],
    user: &User,
) -> Option<VmiAnswer> {
    let Route::Vmi {
        namespace,
        name,
        subresource,
    } = route
    else {
        return None;
    };
    let request = match vmi::Request::read(subresource, method, body)? {
        Ok(r) => r,
        Err(e) => return Some(status_answer(&e)),
    };
    let key = format!("{namespace}/{name}");
    let outcome = forward(client, handlers, namespace, name, &request, body).await;
    Some(match outcome {
        Ok((status, json)) => {
            info!(vmi = %key, user = %user.name, dry_run = request.dry_run, status, "{subresource}");
            (status, "application/json", json)
        }
        Err(e) => {
            info!(vmi = %key, user = %user.name, code = e.code, "{subresource} refused: {}", e.message);
            if request.action.is_get() {
                let (code, text) = vmi::get_failure(&e);
                (code, "text/plain; charset=utf-8", text.into_bytes())
            } else {
                status_answer(&e)
            }
        }
    })
}

/// The VMI (and VM) read, the preconditions, the handler found and called.
async fn forward(
    client: &kube::Client,
    handlers: &Handlers,
    namespace: &str,
    name: &str,
    request: &vmi::Request,
    body: &[u8],
) -> Result<(u16, Vec<u8>), ApiError> {
    let action = request.action;
    if action == vmi::Action::Unpause {
        let vms = api(client, namespace, "VirtualMachine", "virtualmachines");
        let vm = get(&vms, name).await?;
        vmi::check_vm(action, name, vm.as_ref())?;
    }
    let vmis = api(
        client,
        namespace,
        "VirtualMachineInstance",
        "virtualmachineinstances",
    );
    let vmi = get(&vmis, name)
        .await?
        .ok_or_else(|| ApiError::not_found("virtualmachineinstance", name))?;
    vmi::validate(action, &vmi)?;
    let called = call_handler(client, handlers, namespace, name, request, body, &vmi).await;
    match called {
        Err(e) if action == vmi::Action::Reset => Err(vmi::reset_failure(e, &vmi)),
        other => other,
    }
}

/// The handler of the VMI's node found and called.
async fn call_handler(
    client: &kube::Client,
    handlers: &Handlers,
    namespace: &str,
    name: &str,
    request: &vmi::Request,
    body: &[u8],
    vmi: &Value,
) -> Result<(u16, Vec<u8>), ApiError> {
    let action = request.action;
    let node = vmi["status"]["nodeName"].as_str().unwrap_or_default();
    let pods = handler_pods(client, &handlers.namespace, node).await?;
    let address = vmi::handler_address(vmi, &pods, handlers.port)?;
    if request.dry_run {
        return Ok((200, Vec::new()));
    }
    let forwarded = if action.forwards_body() {
        body.to_vec()
    } else {
        Vec::new()
    };
    let answer = handlers
        .client
        .call(
            &address,
            action.method(),
            &action.handler_path(namespace, name),
            forwarded,
        )
        .await
        .map_err(|e| ApiError::internal(&e.to_string()))?;
    if !(200..300).contains(&answer.status) {
        return Err(ApiError::internal(&vmi::handler_failure(
            answer.status,
            &answer.reason,
            String::from_utf8_lossy(&answer.body).trim_end(),
        )));
    }
    if !action.is_get() {
        // KubeVirt's PUT handler writes nothing on success: an empty 200.
        return Ok((200, Vec::new()));
    }
    // The handler's JSON, checked to be JSON as KubeVirt's decode into the typed answer does.
    serde_json::from_slice::<Value>(&answer.body)
        .map(|v| (200, serde_json::to_vec(&v).unwrap_or_default()))
        .map_err(|e| ApiError::internal(&e.to_string()))
}

/// The virt-handler pods on `node` (KubeVirt's field and label selectors).
pub(super) async fn handler_pods(
    client: &kube::Client,
    namespace: &str,
    node: &str,
) -> Result<Vec<Value>, ApiError> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default()
        .labels(vmi::HANDLER_LABEL)
        .fields(&format!("spec.nodeName={node}"));
    let list = pods
        .list(&params)
        .await
        .map_err(|e| ApiError::bad_request(&e.to_string()))?;
    Ok(list
        .items
        .iter()
        .filter_map(|p| serde_json::to_value(p).ok())
        .collect())
}
