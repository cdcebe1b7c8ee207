//! What `defaults`, `overhead` and `pod` read: a VMI or VM file (or standard input), the cluster
//! flags and the instancetype flags; and what they make of it: every object of the file admitted
//! as the cluster would admit it ([`crate::pipeline::admitted_vmis`]), one output each.

use std::path::PathBuf;

use kvrs_core::{ClusterConfig, VirtualMachineInstance};

use crate::cmd::cluster::{Cluster, ClusterArgs};
use crate::cmd::instancetypes::InstancetypeArgs;
use crate::input::CliError;
use crate::pipeline::{admitted_vmis, print_outputs};

/// The input flags of `defaults`, `overhead` and `pod` (flattened into each one's `Args`).
#[derive(clap::Args)]
pub struct WorkloadArgs {
    /// A VMI or VM as YAML or JSON, or `-` for standard input.
    pub file: PathBuf,
    /// The cluster's configuration.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The instancetypes and preferences VMs reference.
    #[command(flatten)]
    pub instancetypes: InstancetypeArgs,
}

impl WorkloadArgs {
    /// The cluster the flags describe (`--kubevirt-cr`, `--feature-gates`).
    pub fn cluster(&self) -> Result<Cluster, CliError> {
        self.cluster.load()
    }

    /// Every VMI of the file (a VM's as its controller would create it) admitted under
    /// `config`, made into one output each by `render` (given the name errors use for the
    /// object). The first failure is the error: nothing is printed for a file with a bad object.
    pub fn render<T>(
        &self,
        config: &ClusterConfig,
        mut render: impl FnMut(&str, &VirtualMachineInstance) -> Result<T, CliError>,
    ) -> Result<Vec<T>, CliError> {
        admitted_vmis(&self.file, config, &self.instancetypes.load()?)?
            .iter()
            .map(|(origin, vmi)| render(origin, vmi))
            .collect()
    }

    /// The whole of a text subcommand: the cluster, then [`Self::render`] with it, printed as
    /// [`print_outputs`] prints (one as it is, several as `---`-separated documents).
    pub fn print_each(
        &self,
        mut render: impl FnMut(
            &str,
            &VirtualMachineInstance,
            &ClusterConfig,
        ) -> Result<String, CliError>,
    ) -> Result<(), CliError> {
        let cluster = self.cluster()?;
        let config = &cluster.config;
        let outputs = self.render(config, |origin, vmi| {
            cluster.check_bindings(origin, vmi)?;
            render(origin, vmi, config)
        })?;
        print_outputs(&outputs);
        Ok(())
    }
}
