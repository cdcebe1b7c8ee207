//! The notify server virt-handler runs for its launchers, as the launcher tests play it: every
//! domain event kept, read back as the domains they carry or as `(type, status, reason)`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kvrs_ipc::{DomainEvent, NotifyService, ServeOptions, ServerHandle, serve_notify};

/// Records every domain event.
#[derive(Default)]
pub struct Recorder(Mutex<Vec<DomainEvent>>);

#[tonic::async_trait]
impl NotifyService for Recorder {
    async fn handle_domain_event(&self, event: DomainEvent) -> kvrs_ipc::CmdResult {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(event);
        Ok(())
    }
}

impl Recorder {
    fn events(&self) -> Vec<DomainEvent> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The domain JSON of every event so far.
    pub fn domains(&self) -> Vec<serde_json::Value> {
        self.events()
            .iter()
            .filter_map(|e| serde_json::from_slice(&e.domain_json).ok())
            .collect()
    }

    /// `(event type, Status.Status, Status.Reason)` of every event so far.
    pub fn seen(&self) -> Vec<(String, String, String)> {
        self.events()
            .iter()
            .map(|e| {
                let v: serde_json::Value =
                    serde_json::from_slice(&e.domain_json).unwrap_or_default();
                let s = |k: &str| v["Status"][k].as_str().unwrap_or("").to_string();
                (e.event_type.clone(), s("Status"), s("Reason"))
            })
            .collect()
    }
}

/// A recorder serving the notify socket `socket` of a pod, for its launcher (UID 107).
pub async fn serve_recorder(socket: PathBuf) -> (Arc<Recorder>, ServerHandle) {
    let recorder = Arc::new(Recorder::default());
    let server = serve_notify(
        socket,
        recorder.clone(),
        ServeOptions {
            owner: Some((107, 107)),
            ..ServeOptions::default()
        },
    )
    .await
    .expect("notify server");
    (recorder, server)
}
