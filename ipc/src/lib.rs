//! kvrs-ipc: virt-handler <-> virt-launcher gRPC on Unix sockets, wire-compatible with KubeVirt v1.9.0.
