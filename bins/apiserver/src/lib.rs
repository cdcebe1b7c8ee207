//! Placeholder: filled in by the apiserver work.
