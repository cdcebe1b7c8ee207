//! `<interface>` (`api.Interface` and its parts).

use super::{go_struct, xml_name};
use crate::domain::{
    Acpi, FilterRef, Interface, InterfaceBackend, InterfaceDriver, InterfaceSource,
    InterfaceTarget, LinkState, Mac, Model, Mtu, PortForward, PortForwardRange, Rom,
};

go_struct!(Interface {
    "XMLName" = xml_name(),
    "Address" => address,
    "Type" => kind,
    "TrustGuestRxFilters" => trust_guest_rx_filters as omit,
    "Source" => source,
    "Target" => target,
    "Model" => model,
    "MAC" => mac,
    "MTU" => mtu,
    "BandWidth" => bandwidth,
    "BootOrder" => boot,
    "LinkState" => link,
    "FilterRef" => filterref,
    "Alias" => alias,
    "Driver" => driver,
    "Rom" => rom,
    "ACPI" => acpi,
    "Backend" => backend,
    "PortForward" => port_forward,
});

go_struct!(PortForward {
    "Proto" => proto,
    "Address" => address as omit,
    "Dev" => dev as omit,
    "Ranges" => ranges,
});

go_struct!(PortForwardRange {
    "Start" => start,
    "End" => end as omit,
    "To" => to as omit,
    "Exclude" => exclude as omit,
});

go_struct!(InterfaceBackend {
    "Type" => kind as omit,
    "LogFile" => log_file as omit,
});

go_struct!(Acpi {
    "Index" => index,
});

go_struct!(InterfaceDriver {
    "Name" => name,
    "Queues" => queues,
    "IOMMU" => iommu as omit,
});

go_struct!(LinkState {
    "State" => state,
});

go_struct!(Mac {
    "MAC" => address,
});

go_struct!(Mtu {
    "Size" => size,
});

go_struct!(FilterRef {
    "Filter" => filter,
});

go_struct!(InterfaceSource {
    "Network" => network as omit,
    "Device" => dev as omit,
    "Bridge" => bridge as omit,
    "Mode" => mode as omit,
    "Address" => address,
});

go_struct!(Model {
    "Type" => kind,
});

go_struct!(InterfaceTarget {
    "Device" => dev,
    "Managed" => managed as omit,
});

go_struct!(Rom {
    "Enabled" => enabled,
});
