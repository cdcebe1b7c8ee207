//! One module per subcommand.

pub mod defaults;
pub mod overhead;
pub mod pod;
