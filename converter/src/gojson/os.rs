//! `<os>`, `<sysinfo>` and `<clock>` (`api.OS`, `api.SysInfo`, `api.Clock`).

use super::go_struct;
use crate::domain::{
    AcpiTable, Bios, Boot, BootMenu, Clock, Entry, FirmwareFeature, FirmwareInfo, Loader, NvRam,
    Os, OsAcpi, OsType, SmBios, SysInfo, Timer,
};

go_struct!(Os {
    "Firmware" => firmware as omit,
    "FirmwareInfo" => firmware_info,
    "Type" => kind,
    "ACPI" => acpi,
    "SMBios" => smbios,
    "BootOrder" => boot,
    "BootMenu" => bootmenu,
    "BIOS" => bios,
    "BootLoader" => loader,
    "NVRam" => nvram,
    "Kernel" => kernel as omit,
    "Initrd" => initrd as omit,
    "KernelArgs" => cmdline as omit,
});

go_struct!(FirmwareInfo {
    "Features" => features,
});

go_struct!(FirmwareFeature {
    "Enabled" => enabled,
    "Name" => name,
});

go_struct!(OsType {
    "OS" => os,
    "Arch" => arch as omit,
    "Machine" => machine as omit,
});

go_struct!(OsAcpi {
    "Table" => tables,
});

go_struct!(AcpiTable {
    "Path" => path,
    "Type" => kind as omit,
});

go_struct!(SmBios {
    "Mode" => mode,
});

go_struct!(NvRam {
    "Template" => template as omit,
    "Format" => format as omit,
    "NVRam" => path,
});

go_struct!(Boot {
    "Dev" => dev,
});

go_struct!(BootMenu {
    "Enable" => enable,
    "Timeout" => timeout,
});

go_struct!(Loader {
    "ReadOnly" => readonly as omit,
    "Secure" => secure as omit,
    "Type" => kind as omit,
    "Path" => path,
});

go_struct!(Bios {
    "UseSerial" => useserial as omit,
});

// Go flattens each section to its entry list (`xml:"system>entry"`).
go_struct!(SysInfo {
    "Type" => kind,
    "System" => system.entries,
    "BIOS" => bios.entries,
    "BaseBoard" => base_board.entries,
    "Chassis" => chassis.entries,
});

go_struct!(Entry {
    "Name" => name,
    "Value" => value,
});

go_struct!(Clock {
    "Offset" => offset as omit,
    "Timezone" => timezone as omit,
    "Adjustment" => adjustment as omit,
    "Timer" => timers,
});

go_struct!(Timer {
    "Name" => name,
    "TickPolicy" => tickpolicy as omit,
    "Present" => present as omit,
    "Track" => track as omit,
    "Frequency" => frequency as omit,
});
