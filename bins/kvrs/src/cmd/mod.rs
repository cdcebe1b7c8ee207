//! One module per subcommand.

pub mod decide;
pub mod convert;
pub mod defaults;
pub mod overhead;
pub mod pod;
