//! `<memoryBacking>` and the virtio-mem `<memory>` device (`api.MemoryBacking`, `api.MemoryDevice`).

use super::{go_struct, xml_name};
use crate::domain::{
    HugePage, HugePages, MemoryAddress, MemoryAllocation, MemoryBacking, MemoryBackingAccess,
    MemoryBackingSource, MemoryDevice, MemoryTarget,
};

go_struct!(MemoryBacking {
    "HugePages" => hugepages,
    "Source" => source,
    "Access" => access,
    "Allocation" => allocation,
    "NoSharePages" => nosharepages,
});

go_struct!(HugePages {
    "HugePage" => pages,
});

go_struct!(HugePage {
    "Size" => size,
    "Unit" => unit,
    "NodeSet" => nodeset,
});

go_struct!(MemoryBackingSource {
    "Type" => kind,
});

go_struct!(MemoryBackingAccess {
    "Mode" => mode,
});

go_struct!(MemoryAllocation {
    "Mode" => mode,
});

go_struct!(MemoryDevice {
    "XMLName" = xml_name(),
    "Model" => model,
    "Target" => target,
    "Alias" => alias,
    "Address" => address,
});

go_struct!(MemoryTarget {
    "Size" => size,
    "Requested" => requested,
    "Current" => current,
    "Node" => node,
    "Block" => block,
    "Address" => address,
});

go_struct!(MemoryAddress {
    "Base" => base,
});
