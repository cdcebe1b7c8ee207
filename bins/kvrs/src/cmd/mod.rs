//! One module per subcommand.

pub mod cluster;
pub mod convert;
pub mod decide;
pub mod defaults;
pub mod instancetypes;
pub mod kubelet;
pub mod launcher;
pub mod overhead;
pub mod pod;
pub mod run;
pub mod workload;
