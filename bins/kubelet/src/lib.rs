//! Placeholder: filled in by the kubelet work.
