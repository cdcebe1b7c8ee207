//! Shared helpers for kvrs's cross-crate tests: where the oracle corpus lives and how to read it
//! (one locator for every test: [`kvrs_corpus`]).

pub use kvrs_corpus::{cases_with, read_json, shared_dir};
