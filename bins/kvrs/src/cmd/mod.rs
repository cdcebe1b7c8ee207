//! One module per subcommand.

pub mod decide;
pub mod convert;
pub mod defaults;
pub mod launcher;
pub mod overhead;
pub mod pod;
