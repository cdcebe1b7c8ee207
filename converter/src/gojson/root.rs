//! `api.DomainSpec` and the small types that live next to it in [`crate::domain`].

use super::{go_struct, xml_name};
use crate::domain::{
    Commandline, Domain, IoThreads, Iommufd, LaunchSecurity, MaxMemory, Memory, QemuArg, QemuEnv,
    QuoteGenerationService, Resource,
};

go_struct!(Domain {
    "XMLName" = xml_name(),
    "Type" => kind,
    "XmlNS" => xmlns_qemu as omit,
    "Name" => name,
    "UUID" => uuid as omit,
    "Memory" => memory,
    "CurrentMemory" => current_memory,
    "MaxMemory" => max_memory,
    "MemoryBacking" => memory_backing,
    "OS" => os,
    "SysInfo" => sysinfo,
    "Devices" => devices,
    "Clock" => clock,
    "Resource" => resource,
    "QEMUCmd" => qemu_commandline,
    "Metadata" => metadata,
    "Features" => features,
    "CPU" => cpu,
    "VCPU" => vcpu,
    "VCPUs" => vcpus,
    "CPUTune" => cputune,
    "NUMATune" => numatune,
    "IOThreads" => iothreads,
    "LaunchSecurity" => launch_security,
    "OnReboot" => on_reboot as omit,
    "IOMMUFD" => iommufd,
});

go_struct!(Memory {
    "Value" => value,
    "Unit" => unit,
});

go_struct!(MaxMemory {
    "Value" => value,
    "Unit" => unit,
    "Slots" => slots,
});

go_struct!(Resource {
    "Partition" => partition,
});

go_struct!(Commandline {
    "QEMUEnv" => env,
    "QEMUArg" => arg,
});

go_struct!(QemuEnv {
    "Name" => name,
    "Value" => value,
});

go_struct!(QemuArg {
    "Value" => value,
});

go_struct!(IoThreads {
    "IOThreads" => count,
});

go_struct!(LaunchSecurity {
    "Type" => kind,
    "DHCert" => dh_cert as omit,
    "Session" => session as omit,
    "Cbitpos" => cbitpos as omit,
    "ReducedPhysBits" => reduced_phys_bits as omit,
    "Policy" => policy as omit,
    "QuoteGenerationService" => quote_generation_service,
});

go_struct!(QuoteGenerationService {
    "Path" => path as omit,
});

go_struct!(Iommufd {
    "XMLName" = xml_name(),
    "Enabled" => enabled,
    "FDGroup" => fdgroup as omit,
});
