//! One module per subcommand.

pub mod defaults;
