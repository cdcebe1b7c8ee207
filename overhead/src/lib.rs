//! kvrs-overhead: Memory overhead and resource math of KubeVirt v1.9.0 launcher pods, on plain numbers.
