//! Unit tests of the validation checks.
