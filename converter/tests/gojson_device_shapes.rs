//! Go JSON of every device kind, with every attribute set, against expectations written by hand
//! from the Go types of KubeVirt's `virtwrap/api` package (the oracle corpus leaves most of these
//! empty): Go field names in declaration order, `null` for nil pointers and slices, `""`/`0` for
//! unset values, `{}` for field-less structs, aliases as `{Name, UserDefined}` without `ua-`.

use kvrs_converter::gojson::{GoJson, Path};
use kvrs_converter::{Domain, xmltree};
use serde_json::{Value, json};

mod common;
use common::first_difference;

const DEVICES_XML: &str = r#"<domain type="kvm">
  <name>ns_vm</name>
  <memory unit="b">1073741824</memory>
  <os><type>hvm</type></os>
  <devices>
    <emulator>/usr/bin/qemu-kvm</emulator>
    <interface type="bridge" trustGuestRxFilters="yes">
      <address type="pci" domain="0x0000" bus="0x01" slot="0x00" function="0x0"/>
      <source network="net" dev="eth0" bridge="br0" mode="passthrough">
        <address type="pci" domain="0x0000" bus="0x02" slot="0x03" function="0x1"/>
      </source>
      <target dev="tap0" managed="no"/>
      <model type="virtio"/>
      <mac address="02:00:00:00:00:01"/>
      <mtu size="1400"/>
      <bandwidth/>
      <boot order="2"/>
      <link state="down"/>
      <filterref filter="clean-traffic"/>
      <alias name="ua-default"/>
      <driver name="vhost" queues="4" iommu="on"/>
      <rom enabled="no"/>
      <acpi index="3"/>
      <backend type="passt" logFile="/var/log/passt.log"/>
      <portForward proto="tcp" address="10.0.0.1" dev="eth0">
        <range start="80" end="90" to="8080" exclude="no"/>
      </portForward>
    </interface>
    <channel type="unix">
      <source mode="bind" path="/p"/>
      <target name="org.qemu.guest_agent.0" type="virtio" address="1.2.3.4" port="5" state="connected"/>
    </channel>
    <hostdev type="pci" managed="no" mode="subsystem" model="vfio-pci" display="on" ramfb="on">
      <source><address type="pci" domain="0x0000" bus="0x81" slot="0x00" function="0x0"/></source>
      <boot order="3"/>
      <address type="pci" domain="0x0000" bus="0x0a" slot="0x00" function="0x0"/>
      <alias name="ua-gpu1"/>
      <driver iommufd="yes"/>
      <acpi nodeset="1"/>
    </hostdev>
    <hostdev type="mdev">
      <source><address uuid="c4b3e8a0-0000-4000-8000-000000000001"/></source>
    </hostdev>
    <panic model="hyperv"/>
    <panic/>
    <controller type="pci" index="1" model="pcie-expander-bus">
      <driver iothread="2" queues="4" iommu="on"/>
      <alias name="pci.1"/>
      <address type="pci" domain="0x0000" bus="0x00" slot="0x05" function="0x0"/>
      <pcihole64 unit="KiB">1024</pcihole64>
      <target busNr="254"><node>0</node></target>
    </controller>
    <video><model type="qxl" heads="1" ram="65536" vram="16384" vgamem="8192"/></video>
    <graphics autoport="yes" defaultMode="secure" passwdValidTo="2024-01-01T00:00:00" port="5900" tlsPort="5901" type="spice">
      <listen type="address" address="127.0.0.1" newtork="n1" socket="/s"/>
    </graphics>
    <memballoon model="virtio" freePageReporting="on">
      <stats period="10"/>
      <address type="pci" domain="0x0000" bus="0x06" slot="0x00" function="0x0"/>
      <driver iommu="on"/>
    </memballoon>
    <disk device="disk" snapshot="no" type="network" model="virtio-transitional">
      <source startupPolicy="optional" protocol="rbd" name="pool/img">
        <host name="mon1" port="6789"/>
        <reservations managed="yes" migration="no"><source type="unix" path="/r" mode="client"/></reservations>
        <slices><slice type="storage" offset="512" size="1024"/></slices>
        <dataStore type="file"><format type="raw"/><source file="/ds"/></dataStore>
      </source>
      <target bus="virtio" dev="vdb" tray="closed"/>
      <serial>S1</serial>
      <driver cache="none" error_policy="stop" io="native" name="qemu" type="raw" iothread="1" queues="2" discard="unmap" iommu="on">
        <iothreads><iothread id="1"/><iothread id="2"/></iothreads>
      </driver>
      <readonly/>
      <auth username="admin"><secret type="ceph" usage="u" uuid="x"/></auth>
      <alias name="ua-data"/>
      <backingStore type="file"><format type="qcow2"/><source file="/base"/></backingStore>
      <boot order="1"/>
      <address type="drive" controller="0" bus="0" target="0" unit="1"/>
      <blockio logical_block_size="512" physical_block_size="4096" discard_granularity="0"/>
      <filesystemOverhead>0.055</filesystemOverhead>
      <capacity>1073741824</capacity>
      <shareable/>
    </disk>
    <input type="tablet" bus="usb" model="virtio">
      <alias name="ua-tablet"/>
      <address type="usb" bus="0"/>
    </input>
    <serial type="unix">
      <target port="0"/>
      <source mode="bind" path="/s0"/>
      <alias name="serial0"/>
      <log file="/l" append="on"/>
    </serial>
    <console type="pty">
      <target type="serial" port="0"/>
      <source mode="bind" path="/c"/>
      <alias name="console0"/>
    </console>
    <watchdog model="i6300esb" action="poweroff">
      <alias name="ua-wd"/>
      <address type="pci" domain="0x0000" bus="0x07" slot="0x00" function="0x0"/>
    </watchdog>
    <rng model="virtio">
      <backend model="random">/dev/urandom</backend>
      <address type="pci" domain="0x0000" bus="0x08" slot="0x00" function="0x0"/>
      <driver iommu="on"/>
    </rng>
    <filesystem type="mount" accessMode="passthrough">
      <source dir="/d" socket="/sock"/>
      <target dir="tag"/>
      <driver type="virtiofs" queue="1024"/>
      <binary path="/usr/libexec/virtiofsd" xattr="on"><cache mode="always"/><lock posix="on" flock="on"/></binary>
    </filesystem>
    <redirdev type="unix" bus="usb"><source mode="connect" path="/r"/></redirdev>
    <sound model="ich9"><alias name="ua-sound"/></sound>
    <tpm model="tpm-crb"><backend type="emulator" version="2.0" persistent_state="yes"/></tpm>
    <vsock model="virtio-non-transitional"><cid auto="no" address="3"/></vsock>
    <memory model="virtio-mem">
      <target>
        <size unit="b">1</size>
        <requested unit="b">2</requested>
        <current unit="b">3</current>
        <node>0</node>
        <block unit="b">2097152</block>
        <address base="0x100000000"/>
      </target>
      <alias name="virtiomem0"/>
      <address type="pci" domain="0x0000" bus="0x09" slot="0x00" function="0x0"/>
    </memory>
    <iommu model="intel"><driver pciBus="1" accel="on" ats="on" ril="on" ssidSize="20" oas="48"/></iommu>
  </devices>
  <metadata><kubevirt xmlns="http://kubevirt.io"><uid></uid></kubevirt></metadata>
  <cpu></cpu>
</domain>"#;

/// `api.Address` with only the given members set.
fn address(set: &[(&str, &str)]) -> Value {
    let mut a = json!({
        "Type": "", "Domain": "", "Bus": "", "Slot": "", "Function": "", "Controller": "", "Target": "",
        "Unit": "", "UUID": "", "Device": "", "CSSID": "", "SSID": "", "DevNo": ""
    });
    for (k, v) in set {
        assert!(a.get(*k).is_some(), "{k} is not a field of api.Address");
        a[*k] = json!(v);
    }
    a
}

fn pci(bus: &str, slot: &str, function: &str) -> Value {
    address(&[
        ("Type", "pci"),
        ("Domain", "0x0000"),
        ("Bus", bus),
        ("Slot", slot),
        ("Function", function),
    ])
}

/// `api.DiskSource` with only the given string members set.
fn disk_source(set: &[(&str, &str)]) -> Value {
    let mut s = json!({
        "Dev": "", "File": "", "StartupPolicy": "", "Protocol": "", "Name": "", "Host": null,
        "Reservations": null, "Slices": null, "DataStore": null
    });
    for (k, v) in set {
        s[*k] = json!(v);
    }
    s
}

fn alias(name: &str, user: bool) -> Value {
    json!({"Name": name, "UserDefined": user})
}

fn expected_devices() -> Value {
    let empty_name = json!({"Space": "", "Local": ""});
    let mut disk_src = disk_source(&[
        ("StartupPolicy", "optional"),
        ("Protocol", "rbd"),
        ("Name", "pool/img"),
    ]);
    disk_src["Host"] = json!({"Name": "mon1", "Port": "6789"});
    disk_src["Reservations"] = json!({"Managed": "yes", "Migration": "no", "SourceReservations": {"Type": "unix", "Path": "/r", "Mode": "client"}});
    disk_src["Slices"] = json!([{"Slice": {"Type": "storage", "Offset": 512, "Size": 1024}}]);
    disk_src["DataStore"] = json!({"Type": "file", "Format": {"Type": "raw"}, "Source": disk_source(&[("File", "/ds")])});
    json!({
        "Emulator": "/usr/bin/qemu-kvm",
        "Interfaces": [{
            "XMLName": empty_name,
            "Address": pci("0x01", "0x00", "0x0"),
            "Type": "bridge",
            "TrustGuestRxFilters": "yes",
            "Source": {"Network": "net", "Device": "eth0", "Bridge": "br0", "Mode": "passthrough",
                "Address": pci("0x02", "0x03", "0x1")},
            "Target": {"Device": "tap0", "Managed": "no"},
            "Model": {"Type": "virtio"},
            "MAC": {"MAC": "02:00:00:00:00:01"},
            "MTU": {"Size": "1400"},
            "BandWidth": {},
            "BootOrder": {"Order": 2},
            "LinkState": {"State": "down"},
            "FilterRef": {"Filter": "clean-traffic"},
            "Alias": alias("default", true),
            "Driver": {"Name": "vhost", "Queues": 4, "IOMMU": "on"},
            "Rom": {"Enabled": "no"},
            "ACPI": {"Index": 3},
            "Backend": {"Type": "passt", "LogFile": "/var/log/passt.log"},
            "PortForward": [{"Proto": "tcp", "Address": "10.0.0.1", "Dev": "eth0",
                "Ranges": [{"Start": 80, "End": 90, "To": 8080, "Exclude": "no"}]}]
        }],
        "Channels": [{
            "Type": "unix",
            "Source": {"Mode": "bind", "Path": "/p"},
            "Target": {"Name": "org.qemu.guest_agent.0", "Type": "virtio", "Address": "1.2.3.4", "Port": 5,
                "State": "connected"}
        }],
        "HostDevices": [
            {
                "XMLName": empty_name,
                "Source": {"Address": pci("0x81", "0x00", "0x0")},
                "Type": "pci",
                "BootOrder": {"Order": 3},
                "Managed": "no",
                "Mode": "subsystem",
                "Model": "vfio-pci",
                "Address": pci("0x0a", "0x00", "0x0"),
                "Alias": alias("gpu1", true),
                "Display": "on",
                "RamFB": "on",
                "Driver": {"Iommufd": "yes"},
                "ACPI": {"NodeSet": "1"}
            },
            {
                "XMLName": empty_name,
                "Source": {"Address": address(&[("UUID", "c4b3e8a0-0000-4000-8000-000000000001")])},
                "Type": "mdev", "BootOrder": null, "Managed": "", "Mode": "", "Model": "", "Address": null,
                "Alias": null, "Display": "", "RamFB": "", "Driver": null, "ACPI": null
            }
        ],
        "PanicDevices": [{"Model": "hyperv"}, {"Model": null}],
        "Controllers": [{
            "Type": "pci",
            "Index": "1",
            "Model": "pcie-expander-bus",
            "Driver": {"IOThread": 2, "Queues": 4, "IOMMU": "on"},
            "Alias": alias("pci.1", false),
            "Address": pci("0x00", "0x05", "0x0"),
            "PCIHole64": {"Value": 1024, "Unit": "KiB"},
            "Target": {"BusNr": 254, "NUMANode": 0}
        }],
        "Video": [{"Model": {"Type": "qxl", "Heads": 1, "Ram": 65536, "VRam": 16384, "VGAMem": 8192}}],
        "Graphics": [{
            "AutoPort": "yes",
            "DefaultMode": "secure",
            "Listen": {"Type": "address", "Address": "127.0.0.1", "Network": "n1", "Socket": "/s"},
            "PasswdValidTo": "2024-01-01T00:00:00",
            "Port": 5900,
            "TLSPort": 5901,
            "Type": "spice"
        }],
        "Ballooning": {
            "Model": "virtio",
            "Stats": {"Period": 10},
            "Address": pci("0x06", "0x00", "0x0"),
            "Driver": {"IOMMU": "on"},
            "FreePageReporting": "on"
        },
        "Disks": [{
            "Device": "disk",
            "Snapshot": "no",
            "Type": "network",
            "Source": disk_src,
            "Target": {"Bus": "virtio", "Device": "vdb", "Tray": "closed"},
            "Serial": "S1",
            "Driver": {"Cache": "none", "ErrorPolicy": "stop", "IO": "native", "Name": "qemu", "Type": "raw",
                "IOThread": 1, "IOThreads": {"IOThread": [{"Id": 1}, {"Id": 2}]}, "Queues": 2, "Discard": "unmap",
                "IOMMU": "on"},
            "ReadOnly": {},
            "Auth": {"Username": "admin", "Secret": {"Type": "ceph", "Usage": "u", "UUID": "x"}},
            "Alias": alias("data", true),
            "BackingStore": {"Type": "file", "Format": {"Type": "qcow2"}, "Source": disk_source(&[("File", "/base")])},
            "BootOrder": {"Order": 1},
            "Address": address(&[("Type", "drive"), ("Controller", "0"), ("Bus", "0"), ("Target", "0"), ("Unit", "1")]),
            "Model": "virtio-transitional",
            "BlockIO": {"LogicalBlockSize": 512, "PhysicalBlockSize": 4096, "DiscardGranularity": 0},
            "FilesystemOverhead": "0.055",
            "Capacity": 1073741824,
            "Shareable": {}
        }],
        "Inputs": [{
            "Type": "tablet", "Bus": "usb", "Alias": alias("tablet", true),
            "Address": address(&[("Type", "usb"), ("Bus", "0")]), "Model": "virtio"
        }],
        "Serials": [{
            "Type": "unix", "Target": {"Port": 0}, "Source": {"Mode": "bind", "Path": "/s0"},
            "Alias": alias("serial0", false), "Log": {"File": "/l", "Append": "on"}
        }],
        "Consoles": [{
            "Type": "pty", "Target": {"Type": "serial", "Port": 0}, "Source": {"Mode": "bind", "Path": "/c"},
            "Alias": alias("console0", false)
        }],
        "Watchdogs": [{"Model": "i6300esb", "Action": "poweroff", "Alias": alias("wd", true),
            "Address": pci("0x07", "0x00", "0x0")}],
        "Rng": {"Model": "virtio", "Backend": {"Model": "random", "Source": "/dev/urandom"},
            "Address": pci("0x08", "0x00", "0x0"), "Driver": {"IOMMU": "on"}},
        "Filesystems": [{
            "Type": "mount", "AccessMode": "passthrough",
            "Source": {"Dir": "/d", "Socket": "/sock"},
            "Target": {"Dir": "tag"},
            "Driver": {"Type": "virtiofs", "Queue": "1024"},
            "Binary": {"Path": "/usr/libexec/virtiofsd", "Xattr": "on", "Cache": {"Mode": "always"},
                "Lock": {"Posix": "on", "Flock": "on"}}
        }],
        "Redirs": [{"Type": "unix", "Bus": "usb", "Source": {"Mode": "connect", "Path": "/r"}}],
        "SoundCards": [{"Alias": alias("sound", true), "Model": "ich9"}],
        "TPMs": [{"Model": "tpm-crb", "Backend": {"Type": "emulator", "Version": "2.0", "PersistentState": "yes"}}],
        "VSOCK": {"Model": "virtio-non-transitional", "CID": {"Auto": "no", "Address": 3}},
        "Memory": {
            "XMLName": empty_name,
            "Model": "virtio-mem",
            "Target": {
                "Size": {"Value": 1, "Unit": "b"},
                "Requested": {"Value": 2, "Unit": "b"},
                "Current": {"Value": 3, "Unit": "b"},
                "Node": "0",
                "Block": {"Value": 2097152, "Unit": "b"},
                "Address": {"Base": "0x100000000"}
            },
            "Alias": alias("virtiomem0", false),
            "Address": pci("0x09", "0x00", "0x0")
        },
        "IOMMU": [{"XMLName": empty_name, "Model": "intel",
            "Driver": {"PCIBus": "1", "Accel": "on", "ATS": "on", "RIL": "on", "SSIDSize": "20", "OAS": "48"}}]
    })
}

#[test]
fn device_xml_is_the_round_trip_baseline() {
    let d = Domain::from_xml(DEVICES_XML).unwrap();
    let diffs = xmltree::diff(DEVICES_XML, &d.to_xml().unwrap(), 10).unwrap();
    assert!(
        diffs.is_empty(),
        "the model does not carry the test XML unchanged: {diffs:?}"
    );
}

#[test]
fn every_device_field_has_go_name_order_and_zero_value() {
    let d = Domain::from_xml(DEVICES_XML).unwrap();
    let got = d.devices.to_go();
    if let Some(diff) = first_difference(&expected_devices(), &got, "Spec.Devices") {
        panic!("{diff}");
    }
}

#[test]
fn go_device_json_reads_back_to_the_same_xml() {
    let mut d = Domain::from_xml(DEVICES_XML).unwrap();
    d.devices = GoJson::from_go(&expected_devices(), &Path::ROOT).unwrap();
    let diffs = xmltree::diff(DEVICES_XML, &d.to_xml().unwrap(), 10).unwrap();
    assert!(diffs.is_empty(), "{diffs:?}");
}

#[test]
fn alias_user_flag_maps_to_the_ua_prefix() {
    use kvrs_converter::domain::Alias;
    assert_eq!(Alias::user("disk0").to_go(), alias("disk0", true));
    assert_eq!(Alias::plain("ua").to_go(), alias("ua", false));
    assert_eq!(
        Alias::from_go(&alias("net1", true), &Path::ROOT)
            .unwrap()
            .name,
        "ua-net1"
    );
    assert_eq!(
        Alias::from_go(&alias("net1", false), &Path::ROOT)
            .unwrap()
            .name,
        "net1"
    );
    // Go's decoder leaves missing members at their zero values.
    assert_eq!(
        Alias::from_go(&json!({"Name": "x"}), &Path::ROOT)
            .unwrap()
            .name,
        "x"
    );
}
