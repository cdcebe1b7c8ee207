//! Shared helpers for kvrs's cross-crate tests: where the oracle corpus lives and how to read it
//! (one locator for every test: [`kvrs_corpus`]), and the differences from KubeVirt kept on
//! purpose ([`deliberate`]), and what Go's encoding/json writes for KubeVirt's types ([`go_json`]).

pub mod deliberate;
pub mod go_harness;
pub mod go_json;

pub use deliberate::{Deliberate, Difference};
pub use go_harness::{go_harness, run_json};
pub use kvrs_corpus::{cases_with, read_json, shared_dir};
