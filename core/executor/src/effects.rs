//! The side effects a plan can have, as traits: the API server, a VMI's virt-launcher, the node.
//!
//! Each is one method taking the plan's own description of the effect, so a runtime maps the
//! plan vocabulary to its transport in one place and the executor stays the same everywhere.
//! The methods are `async` because the cluster transports are; an in-memory implementation
//! simply never awaits.

use std::future::Future;

use kvrs_api::VirtualMachineInstance;
use kvrs_decide::{ApiWrite, Event, Expectation, LauncherCall, NodeStep};
use kvrs_queue::Instant;

use crate::expectations::ControllerExpectations;

/// How an API write failed, as a stable label (the API server's reason, reduced to what a
/// controller reacts to differently).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiErrorKind {
    /// 409: a `test` precondition, a resourceVersion or a UID precondition did not hold.
    Conflict,
    /// 404: the object is gone.
    NotFound,
    /// 409 on create: the name is taken.
    AlreadyExists,
    /// 403: not allowed (RBAC, Pod Security admission).
    Forbidden,
    /// 422 or 400: the server refused the object itself.
    Invalid,
    /// Anything else: the server or the connection failed.
    Other,
}

impl ApiErrorKind {
    /// The label, e.g. `conflict`.
    pub fn label(self) -> &'static str {
        match self {
            ApiErrorKind::Conflict => "conflict",
            ApiErrorKind::NotFound => "not_found",
            ApiErrorKind::AlreadyExists => "already_exists",
            ApiErrorKind::Forbidden => "forbidden",
            ApiErrorKind::Invalid => "invalid",
            ApiErrorKind::Other => "other",
        }
    }
}

/// A failed API write: its kind and the server's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// What kind of failure.
    pub kind: ApiErrorKind,
    /// The server's message, as KubeVirt would report it.
    pub message: String,
}

impl ApiError {
    /// An error of `kind`.
    pub fn new(kind: ApiErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// The API server, as a plan sees it.
pub trait Api {
    /// Sends one write exactly as described: create, JSON patch with its `test` operations,
    /// delete with its UID precondition, on the subresource named. Never a full replace of an
    /// object the controller only partly understands.
    fn write(&mut self, write: &ApiWrite) -> impl Future<Output = Result<(), ApiError>>;

    /// Sends `writes`, none of which depends on another (a plan's writes marked
    /// [`alongside_previous`](ApiWrite::alongside_previous)), and returns each one's outcome in
    /// their order; all are sent even when one fails. By default one after another; a transport
    /// that can have several requests in flight sends them at the same time.
    fn write_together(
        &mut self,
        writes: &[&ApiWrite],
    ) -> impl Future<Output = Vec<Result<(), ApiError>>> {
        async move {
            let mut out = Vec::with_capacity(writes.len());
            for w in writes {
                out.push(self.write(w).await);
            }
            out
        }
    }

    /// Records an event. Failing to record one never fails a reconcile (as in client-go's
    /// recorder), so there is no error to return.
    fn event(&mut self, event: &Event) -> impl Future<Output = ()>;
}

/// A VMI's virt-launcher, as virt-handler drives it over its command socket.
pub trait Launcher {
    /// Sends `call` for `vmi` (absent when the VMI is gone and only its domain is left).
    fn call(
        &mut self,
        vmi: Option<&VirtualMachineInstance>,
        call: LauncherCall,
    ) -> impl Future<Output = Result<(), String>>;
}

/// The node, outside the launcher pod: container disks, the pod network, device ownership.
pub trait Node {
    /// Does `step` for `vmi` (absent when the VMI is gone).
    fn step(
        &mut self,
        vmi: Option<&VirtualMachineInstance>,
        step: &NodeStep,
    ) -> impl Future<Output = Result<(), String>>;
}

/// Where a controller keeps its expectations while a plan runs.
pub trait Expecting {
    /// Raises `e` before its write is sent.
    fn raise(&mut self, e: &Expectation, now: Instant);
    /// Undoes `e` after its write failed.
    fn lower(&mut self, e: &Expectation);
}

impl Expecting for ControllerExpectations {
    fn raise(&mut self, e: &Expectation, now: Instant) {
        ControllerExpectations::raise(self, e, now);
    }
    fn lower(&mut self, e: &Expectation) {
        ControllerExpectations::lower(self, e);
    }
}

impl<T: Expecting + ?Sized> Expecting for &mut T {
    fn raise(&mut self, e: &Expectation, now: Instant) {
        (**self).raise(e, now);
    }
    fn lower(&mut self, e: &Expectation) {
        (**self).lower(e);
    }
}

impl<T: Api + ?Sized> Api for &mut T {
    fn write(&mut self, write: &ApiWrite) -> impl Future<Output = Result<(), ApiError>> {
        (**self).write(write)
    }
    fn write_together(
        &mut self,
        writes: &[&ApiWrite],
    ) -> impl Future<Output = Vec<Result<(), ApiError>>> {
        (**self).write_together(writes)
    }
    fn event(&mut self, event: &Event) -> impl Future<Output = ()> {
        (**self).event(event)
    }
}

/// An API paired with an expectations store, for runtimes that keep them apart.
#[derive(Debug)]
pub struct With<A, X>(pub A, pub X);

impl<A: Api, X> Api for With<A, X> {
    fn write(&mut self, write: &ApiWrite) -> impl Future<Output = Result<(), ApiError>> {
        self.0.write(write)
    }
    fn write_together(
        &mut self,
        writes: &[&ApiWrite],
    ) -> impl Future<Output = Vec<Result<(), ApiError>>> {
        self.0.write_together(writes)
    }
    fn event(&mut self, event: &Event) -> impl Future<Output = ()> {
        self.0.event(event)
    }
}

impl<A, X: Expecting> Expecting for With<A, X> {
    fn raise(&mut self, e: &Expectation, now: Instant) {
        self.1.raise(e, now);
    }
    fn lower(&mut self, e: &Expectation) {
        self.1.lower(e);
    }
}
