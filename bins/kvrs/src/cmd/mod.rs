//! One module per subcommand.

pub mod convert;
pub mod defaults;
pub mod overhead;
pub mod pod;
