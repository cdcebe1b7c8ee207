//! Criterion benchmarks of kvrs live beside this file; see `[[bench]]` entries in Cargo.toml.
