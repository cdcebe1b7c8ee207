//! Placeholder: filled in by the store work.
