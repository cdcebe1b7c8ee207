//! Unit tests of the defaulting steps.
