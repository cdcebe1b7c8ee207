//! The `v1beta1.DevicePlugin` service of one plugin, as the kubelet calls it.

use std::pin::Pin;

use futures::Stream;
use kvrs_ipc::proto::deviceplugin::v1beta1::{
    AllocateRequest, AllocateResponse, ContainerAllocateResponse,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, DeviceSpec, Empty,
    ListAndWatchResponse, PreStartContainerRequest, PreStartContainerResponse,
    PreferredAllocationRequest, PreferredAllocationResponse, device_plugin_server::DevicePlugin,
};
use kvrs_ipc::tonic::{Request, Response, Status};
use tokio::sync::watch;
use tracing::{debug, info};

use super::plan::{Health, PluginSpec, device_ids, grant};

/// One plugin's answers: its devices with their current health, and the node it grants.
pub struct PluginService {
    /// The plugin.
    pub spec: PluginSpec,
    /// Devices advertised.
    pub count: usize,
    /// Cgroup permissions granted.
    pub permissions: &'static str,
    /// The devices' health.
    pub health: watch::Receiver<Health>,
    /// Becomes `true` when this server instance stops: open ListAndWatch streams send an empty
    /// list (the only way to withdraw devices) and end.
    pub done: watch::Receiver<bool>,
}

/// Every device of `spec` with the same health (they all stand for the one node).
fn device_list(spec: &PluginSpec, count: usize, health: Health) -> ListAndWatchResponse {
    ListAndWatchResponse {
        devices: device_ids(spec, count)
            .map(|id| Device {
                id,
                health: health.as_str().to_string(),
                topology: None,
            })
            .collect(),
    }
}

/// The ListAndWatch stream's state between two sends.
struct Watching {
    first: bool,
    spec: PluginSpec,
    count: usize,
    health: watch::Receiver<Health>,
    done: watch::Receiver<bool>,
}

impl Watching {
    fn list_now(&mut self) -> ListAndWatchResponse {
        let now = *self.health.borrow_and_update();
        device_list(&self.spec, self.count, now)
    }
}

type ListStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[kvrs_ipc::async_trait]
impl DevicePlugin for PluginService {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions::default()))
    }

    type ListAndWatchStream = ListStream;

    /// The whole list now, then again each time the health changes; an empty list when this
    /// server stops.
    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        info!(resource = %self.spec.resource_name(), "the kubelet watches the devices");
        let state = Watching {
            first: true,
            spec: self.spec.clone(),
            count: self.count,
            health: self.health.clone(),
            done: self.done.clone(),
        };
        let stream = futures::stream::unfold(Some(state), |state| async move {
            let mut st = state?;
            if st.first {
                st.first = false;
                let list = st.list_now();
                return Some((Ok(list), Some(st)));
            }
            // The health changed: the new list. This server stops (or the health watch is
            // gone): the devices are withdrawn with an empty list and the stream ends.
            let health_changed = tokio::select! {
                changed = st.health.changed() => changed.is_ok(),
                _ = st.done.wait_for(|d| *d) => false,
            };
            if health_changed {
                let list = st.list_now();
                Some((Ok(list), Some(st)))
            } else {
                Some((Ok(ListAndWatchResponse::default()), None))
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    /// The devices are interchangeable: the first `allocation_size` of those that must be
    /// included, then of those available.
    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| {
                let size = usize::try_from(c.allocation_size).unwrap_or(0);
                let mut ids = c.must_include_device_i_ds;
                for id in c.available_device_i_ds {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
                ids.truncate(size);
                ContainerPreferredAllocationResponse { device_i_ds: ids }
            })
            .collect();
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    /// Each container requesting the resource gets the device node (any number of devices
    /// maps to the one node).
    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let request = request.into_inner();
        let g = grant(&self.spec, self.permissions);
        debug!(
            resource = %self.spec.resource_name(),
            containers = request.container_requests.len(),
            "allocate"
        );
        let container_responses = request
            .container_requests
            .iter()
            .map(|_| ContainerAllocateResponse {
                devices: vec![DeviceSpec {
                    container_path: g.container_path.clone(),
                    host_path: g.host_path.clone(),
                    permissions: g.permissions.clone(),
                }],
                ..ContainerAllocateResponse::default()
            })
            .collect();
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
