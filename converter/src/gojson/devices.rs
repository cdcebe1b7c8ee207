//! `<devices>` and every device kind except disks and interfaces (`api.Devices`, ...).

use super::{GoJson, GoJsonError, Path, go_struct, object, xml_name};
use crate::domain::{
    AcpiHostDev, Address, Alias, BootOrder, Channel, ChannelSource, ChannelTarget, CharSource, Cid,
    Console, ConsoleTarget, Controller, ControllerDriver, ControllerTarget, Devices,
    FilesystemBinary, FilesystemBinaryCache, FilesystemBinaryLock, FilesystemDevice,
    FilesystemDriver, FilesystemSource, FilesystemTarget, Graphics, GraphicsListen, HostDevDriver,
    HostDevice, HostDeviceSource, Input, IommuDevice, IommuDriver, IommuOnly, MemBalloon,
    PanicDevice, PciHole64, RedirectedDevice, RedirectedDeviceSource, Rng, RngBackend, Serial,
    SerialLog, SerialTarget, SoundCard, Stats, Tpm, TpmBackend, Video, VideoModel, Vsock, Watchdog,
};
use serde_json::{Map, Value};

go_struct!(Devices {
    "Emulator" => emulator as omit,
    "Interfaces" => interfaces,
    "Channels" => channels,
    "HostDevices" => hostdevs,
    "PanicDevices" => panics,
    "Controllers" => controllers,
    "Video" => video,
    "Graphics" => graphics,
    "Ballooning" => memballoon,
    "Disks" => disks,
    "Inputs" => inputs,
    "Serials" => serials,
    "Consoles" => consoles,
    "Watchdogs" => watchdogs,
    "Rng" => rng,
    "Filesystems" => filesystems,
    "Redirs" => redirdevs,
    "SoundCards" => sounds,
    "TPMs" => tpms,
    "VSOCK" => vsock,
    "Memory" => memory,
    "IOMMU" => iommus,
});

go_struct!(Address {
    "Type" => kind as omit,
    "Domain" => domain as omit,
    "Bus" => bus as omit,
    "Slot" => slot as omit,
    "Function" => function as omit,
    "Controller" => controller as omit,
    "Target" => target as omit,
    "Unit" => unit as omit,
    "UUID" => uuid as omit,
    "Device" => device as omit,
    "CSSID" => cssid as omit,
    "SSID" => ssid as omit,
    "DevNo" => devno as omit,
});

/// Go keeps the alias name without KubeVirt's `ua-` prefix plus a `UserDefined` flag (its custom
/// `MarshalJSON`); the model keeps the name as written to XML, prefix included.
impl GoJson for Alias {
    fn to_go(&self) -> Value {
        let (name, user) = match self.user_name() {
            Some(n) => (n, true),
            None => (self.name.as_str(), false),
        };
        let mut m = Map::with_capacity(2);
        m.insert("Name".into(), Value::String(name.to_string()));
        m.insert("UserDefined".into(), Value::Bool(user));
        Value::Object(m)
    }

    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        let Some(obj) = object(v, at)? else {
            return Ok(Alias::default());
        };
        let name = match obj.get("Name") {
            Some(x) => String::from_go(x, &at.key("Name"))?,
            None => String::new(),
        };
        let user = match obj.get("UserDefined") {
            Some(x) => bool::from_go(x, &at.key("UserDefined"))?,
            None => false,
        };
        Ok(if user {
            Alias::user(&name)
        } else {
            Alias::plain(&name)
        })
    }
}

go_struct!(BootOrder {
    "Order" => order,
});

go_struct!(PanicDevice {
    "Model" => model,
});

go_struct!(Tpm {
    "Model" => model,
    "Backend" => backend,
});

go_struct!(TpmBackend {
    "Type" => kind,
    "Version" => version,
    "PersistentState" => persistent_state as omit,
});

go_struct!(RedirectedDevice {
    "Type" => kind,
    "Bus" => bus,
    "Source" => source,
});

go_struct!(RedirectedDeviceSource {
    "Mode" => mode,
    "Path" => path,
});

go_struct!(FilesystemDevice {
    "Type" => kind,
    "AccessMode" => access_mode,
    "Source" => source,
    "Target" => target,
    "Driver" => driver,
    "Binary" => binary,
});

go_struct!(FilesystemTarget {
    "Dir" => dir as omit,
});

go_struct!(FilesystemSource {
    "Dir" => dir,
    "Socket" => socket as omit,
});

go_struct!(FilesystemDriver {
    "Type" => kind,
    "Queue" => queue as omit,
});

go_struct!(FilesystemBinary {
    "Path" => path as omit,
    "Xattr" => xattr as omit,
    "Cache" => cache,
    "Lock" => lock,
});

go_struct!(FilesystemBinaryCache {
    "Mode" => mode as omit,
});

go_struct!(FilesystemBinaryLock {
    "Posix" => posix as omit,
    "Flock" => flock as omit,
});

go_struct!(Input {
    "Type" => kind,
    "Bus" => bus,
    "Alias" => alias,
    "Address" => address,
    "Model" => model as omit,
});

go_struct!(HostDevice {
    "XMLName" = xml_name(),
    "Source" => source,
    "Type" => kind,
    "BootOrder" => boot,
    "Managed" => managed as omit,
    "Mode" => mode as omit,
    "Model" => model as omit,
    "Address" => address,
    "Alias" => alias,
    "Display" => display as omit,
    "RamFB" => ramfb as omit,
    "Driver" => driver,
    "ACPI" => acpi,
});

go_struct!(HostDeviceSource {
    "Address" => address,
});

go_struct!(HostDevDriver {
    "Iommufd" => iommufd as omit,
});

go_struct!(AcpiHostDev {
    "NodeSet" => nodeset as omit,
});

go_struct!(Controller {
    "Type" => kind,
    "Index" => index,
    "Model" => model as omit,
    "Driver" => driver,
    "Alias" => alias,
    "Address" => address,
    "PCIHole64" => pcihole64,
    "Target" => target,
});

go_struct!(ControllerDriver {
    "IOThread" => iothread,
    "Queues" => queues,
    "IOMMU" => iommu as omit,
});

go_struct!(PciHole64 {
    "Value" => value,
    "Unit" => unit as omit,
});

go_struct!(ControllerTarget {
    "BusNr" => bus_nr,
    "NUMANode" => node,
});

go_struct!(IommuDevice {
    "XMLName" = xml_name(),
    "Model" => model,
    "Driver" => driver,
});

go_struct!(IommuDriver {
    "PCIBus" => pci_bus as omit,
    "Accel" => accel as omit,
    "ATS" => ats as omit,
    "RIL" => ril as omit,
    "SSIDSize" => ssid_size as omit,
    "OAS" => oas as omit,
});

go_struct!(Serial {
    "Type" => kind,
    "Target" => target,
    "Source" => source,
    "Alias" => alias,
    "Log" => log,
});

go_struct!(SerialTarget {
    "Port" => port,
});

// Go's `SerialSource` and `ConsoleSource`, one type in the model.
go_struct!(CharSource {
    "Mode" => mode as omit,
    "Path" => path as omit,
});

go_struct!(SerialLog {
    "File" => file as omit,
    "Append" => append as omit,
});

go_struct!(Console {
    "Type" => kind,
    "Target" => target,
    "Source" => source,
    "Alias" => alias,
});

go_struct!(ConsoleTarget {
    "Type" => kind,
    "Port" => port,
});

go_struct!(Channel {
    "Type" => kind,
    "Source" => source,
    "Target" => target,
});

go_struct!(ChannelTarget {
    "Name" => name as omit,
    "Type" => kind,
    "Address" => address as omit,
    "Port" => port as omit,
    "State" => state as omit,
});

go_struct!(ChannelSource {
    "Mode" => mode,
    "Path" => path,
});

go_struct!(SoundCard {
    "Alias" => alias,
    "Model" => model,
});

go_struct!(Video {
    "Model" => model,
});

go_struct!(VideoModel {
    "Type" => kind,
    "Heads" => heads,
    "Ram" => ram,
    "VRam" => vram,
    "VGAMem" => vgamem,
});

go_struct!(Graphics {
    "AutoPort" => autoport as omit,
    "DefaultMode" => default_mode as omit,
    "Listen" => listen,
    "PasswdValidTo" => passwd_valid_to as omit,
    "Port" => port as omit,
    "TLSPort" => tls_port as omit,
    "Type" => kind,
});

go_struct!(GraphicsListen {
    "Type" => kind,
    "Address" => address as omit,
    "Network" => network as omit,
    "Socket" => socket as omit,
});

go_struct!(Vsock {
    "Model" => model as omit,
    "CID" => cid,
});

go_struct!(Cid {
    "Auto" => auto,
    "Address" => address as omit,
});

go_struct!(MemBalloon {
    "Model" => model,
    "Stats" => stats,
    "Address" => address,
    "Driver" => driver,
    "FreePageReporting" => free_page_reporting as omit,
});

go_struct!(Stats {
    "Period" => period,
});

// Go's `MemBalloonDriver` and `RngDriver`, one type in the model.
go_struct!(IommuOnly {
    "IOMMU" => iommu as omit,
});

go_struct!(Watchdog {
    "Model" => model,
    "Action" => action,
    "Alias" => alias,
    "Address" => address,
});

go_struct!(Rng {
    "Model" => model,
    "Backend" => backend,
    "Address" => address,
    "Driver" => driver,
});

go_struct!(RngBackend {
    "Model" => model,
    "Source" => source,
});
