//! CPU model, topology, NUMA, vCPU hotplug and pinning (`api.CPU`, `api.VCPU`, `api.CPUTune`, ...).

use super::go_struct;
use crate::domain::{
    Cpu, CpuEmulatorPin, CpuFeature, CpuTopology, CpuTune, CpuTuneIoThreadPin, CpuTuneVcpuPin,
    MemNode, Numa, NumaCell, NumaCellDistances, NumaCellSibling, NumaTune, NumaTuneMemory, Vcpu,
    Vcpus, VcpusVcpu,
};

go_struct!(Cpu {
    "Mode" => mode as omit,
    "Model" => model as omit,
    "Features" => features,
    "Topology" => topology,
    "NUMA" => numa,
});

go_struct!(CpuFeature {
    "Name" => name,
    "Policy" => policy as omit,
});

go_struct!(CpuTopology {
    "Sockets" => sockets as omit,
    "Cores" => cores as omit,
    "Threads" => threads as omit,
});

go_struct!(Numa {
    "Cells" => cells,
});

go_struct!(NumaCell {
    "ID" => id,
    "CPUs" => cpus as omit,
    "Memory" => memory,
    "Unit" => unit as omit,
    "MemoryAccess" => mem_access as omit,
    "Distances" => distances,
});

go_struct!(NumaCellDistances {
    "Siblings" => siblings,
});

go_struct!(NumaCellSibling {
    "ID" => id,
    "Value" => value,
});

go_struct!(Vcpu {
    "Placement" => placement,
    "CPUs" => cpus,
});

go_struct!(Vcpus {
    "VCPU" => vcpu,
});

go_struct!(VcpusVcpu {
    "ID" => id,
    "Enabled" => enabled as omit,
    "Hotpluggable" => hotpluggable as omit,
    "Order" => order as omit,
});

go_struct!(CpuTune {
    "VCPUPin" => vcpupin,
    "IOThreadPin" => iothreadpin,
    "EmulatorPin" => emulatorpin,
});

go_struct!(CpuTuneVcpuPin {
    "VCPU" => vcpu,
    "CPUSet" => cpuset,
});

go_struct!(CpuTuneIoThreadPin {
    "IOThread" => iothread,
    "CPUSet" => cpuset,
});

go_struct!(CpuEmulatorPin {
    "CPUSet" => cpuset,
});

go_struct!(NumaTune {
    "Memory" => memory,
    "MemNodes" => memnodes,
});

go_struct!(NumaTuneMemory {
    "Mode" => mode,
    "NodeSet" => nodeset,
});

go_struct!(MemNode {
    "CellID" => cellid,
    "Mode" => mode,
    "NodeSet" => nodeset,
});
