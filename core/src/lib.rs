//! # kvrs-core
//!
//! One dependency for everything pure in kvrs, under the paths it has always had: the API
//! ([`api`], from `kvrs-api`), admission ([`admission`], [`config`], [`defaults`], [`validate`],
//! [`template`], from `kvrs-admission`), the launcher pod and its resources ([`pod`],
//! [`resources`], from `kvrs-pod`), the controller decisions ([`decide`], from `kvrs-decide`) and,
//! behind the `sim` feature, the cluster simulator (`sim`, from `kvrs-sim`).
//!
//! Tools that need only part of it depend on that crate alone: the converter, the
//! handler↔launcher protocol and virt-launcher take `kvrs-api`, nothing else.
//!
//! ## Example
//!
//! What happens to a VMI between `kubectl create` and its pod, in two calls: admission (namespace,
//! defaults, validation) and the launcher pod virt-controller renders for it.
//!
//! ```
//! use kvrs_core::pod::{PodInputs, render_launcher_pod};
//! use kvrs_core::{ClusterConfig, VirtualMachineInstance, admission::admit};
//!
//! let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "testvmi", "uid": "1234"},
//!     "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}}
//! }))?;
//! let config = ClusterConfig::default();
//! let vmi = admit(vmi, &config)?;
//! assert_eq!(vmi.metadata.namespace.as_deref(), Some("default"));
//!
//! let pod = render_launcher_pod(&vmi, &config, &PodInputs::default())?;
//! assert_eq!(pod.metadata.generate_name.as_deref(), Some("virt-launcher-testvmi-"));
//! let labels = pod.metadata.labels.as_ref().unwrap();
//! assert_eq!(labels["kubevirt.io"], "virt-launcher");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(unreachable_pub)]

pub use kvrs_admission::{config, defaults, template, validate};
pub use kvrs_api::{api, quantity, time};
pub use kvrs_decide as decide;
pub use kvrs_pod as pod;
pub use kvrs_pod::resources;
#[cfg(feature = "sim")]
pub use kvrs_sim as sim;

/// The admission pipeline: namespace default, defaulting, validation (`kvrs-admission`).
pub mod admission {
    pub use kvrs_admission::{AdmissionError, admit, admit_created};
}

pub use kvrs_admission::ClusterConfig;
pub use kvrs_api::{
    Quantity, QuantityError, VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceSpec,
};
