//! Go JSON of every domain-level part the oracle corpus leaves empty, against expectations written
//! by hand from the Go types of KubeVirt's `virtwrap/api` package: Go field names in declaration
//! order, `null` for nil pointers and slices, `""`/`0` for unset values, `{}` for field-less structs.

use kvrs_converter::gojson::{DomainEnvelope, GoJson, from_go_json, to_go_json};
use kvrs_converter::{Domain, xmltree};
use serde_json::{Value, json};

mod common;
use common::first_difference;

/// A domain with every element outside `<devices>` that the model knows, all attributes set.
const FULL_XML: &str = r#"<domain type="kvm" xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0">
  <name>ns_vm</name>
  <uuid>11111111-2222-3333-4444-555555555555</uuid>
  <memory unit="b">2147483648</memory>
  <currentMemory unit="b">1073741824</currentMemory>
  <maxMemory unit="b" slots="2">8589934592</maxMemory>
  <memoryBacking>
    <hugepages><page size="2" unit="M" nodeset="0"/></hugepages>
    <source type="memfd"/>
    <access mode="shared"/>
    <allocation mode="immediate"/>
    <nosharepages/>
  </memoryBacking>
  <os firmware="efi">
    <firmware><feature enabled="yes" name="secure-boot"/></firmware>
    <type arch="x86_64" machine="q35">hvm</type>
    <acpi><table type="slic">/var/slic.bin</table></acpi>
    <smbios mode="sysinfo"/>
    <boot dev="hd"/>
    <bootmenu enable="yes" timeout="1000"/>
    <bios useserial="yes"/>
    <loader readonly="yes" secure="yes" type="pflash">/usr/share/OVMF_CODE.fd</loader>
    <nvram template="/usr/share/OVMF_VARS.fd" format="raw">/var/run/vars.fd</nvram>
    <kernel>/boot/vmlinuz</kernel>
    <initrd>/boot/initrd</initrd>
    <cmdline>console=ttyS0</cmdline>
  </os>
  <sysinfo type="smbios">
    <system><entry name="uuid">abc</entry></system>
    <bios><entry name="vendor">V</entry></bios>
    <baseBoard><entry name="manufacturer">M</entry></baseBoard>
    <chassis><entry name="asset">A</entry></chassis>
  </sysinfo>
  <devices></devices>
  <clock offset="timezone" timezone="Europe/Berlin" adjustment="reset">
    <timer name="hpet" present="no"/>
    <timer name="tsc" frequency="1000000"/>
  </clock>
  <resource><partition>/machine</partition></resource>
  <qemu:commandline><qemu:env name="A" value="1"/><qemu:arg value="-foo"/></qemu:commandline>
  <metadata>
    <kubevirt xmlns="http://kubevirt.io">
      <uid>uid-1</uid>
      <graceperiod>
        <deletionGracePeriodSeconds>30</deletionGracePeriodSeconds>
        <deletionTimestamp>2024-05-01T10:00:00.123456789+02:00</deletionTimestamp>
        <markedForGracefulShutdown>true</markedForGracefulShutdown>
      </graceperiod>
      <migration>
        <uid>m1</uid>
        <startTimestamp>2024-05-01T10:00:00Z</startTimestamp>
        <endTimestamp>2024-05-01T10:05:00.5Z</endTimestamp>
        <failed>true</failed>
        <failureReason>r</failureReason>
        <abortStatus>Aborted</abortStatus>
        <mode>PostCopy</mode>
      </migration>
      <backup>
        <name>b1</name>
        <mode>push</mode>
        <skipQuiesce>true</skipQuiesce>
        <startTimestamp>2024-05-01T11:00:00Z</startTimestamp>
        <failed>true</failed>
        <backupMsg>m</backupMsg>
        <checkpointName>c</checkpointName>
        <volumes>v1,v2</volumes>
        <quiesceStatus>q</quiesceStatus>
      </backup>
      <accessCredential><succeeded>true</succeeded><message>ok</message></accessCredential>
      <memoryDump>
        <fileName>f</fileName>
        <startTimestamp>2024-05-01T12:00:00Z</startTimestamp>
        <endTimestamp>2024-05-01T12:01:00Z</endTimestamp>
        <completed>true</completed>
      </memoryDump>
    </kubevirt>
  </metadata>
  <features>
    <acpi/>
    <apic/>
    <hyperv mode="custom">
      <relaxed state="on"/>
      <vapic state="on"/>
      <spinlocks state="on" retries="8191"/>
      <vpindex state="on"/>
      <runtime state="on"/>
      <synic state="on"/>
      <stimer state="on"><direct state="on"/></stimer>
      <reset state="on"/>
      <vendor_id state="on" value="KVMKVMKVM"/>
      <frequencies state="on"/>
      <reenlightenment state="on"/>
      <tlbflush state="on"><direct state="on"/><extended state="on"/></tlbflush>
      <ipi state="on"/>
      <evmcs state="on"/>
    </hyperv>
    <smm/>
    <kvm><hidden state="on"/><hint-dedicated state="on"/></kvm>
    <pvspinlock state="off"/>
    <pmu state="off"/>
    <vmport state="off"/>
  </features>
  <cpu mode="host-model">
    <model>Skylake</model>
    <feature name="vmx" policy="require"/>
    <topology sockets="2" cores="1" threads="1"/>
    <numa>
      <cell id="0" cpus="0-1" memory="1048576" unit="KiB" memAccess="shared">
        <distances><sibling id="0" value="10"/></distances>
      </cell>
    </numa>
  </cpu>
  <vcpu placement="static">2</vcpu>
  <vcpus><vcpu id="0" enabled="yes" hotpluggable="no" order="1"/></vcpus>
  <cputune><vcpupin vcpu="0" cpuset="1"/><iothreadpin iothread="1" cpuset="2"/><emulatorpin cpuset="3"/></cputune>
  <numatune><memory mode="strict" nodeset="0"/><memnode cellid="1" mode="strict" nodeset="1"/></numatune>
  <iothreads>2</iothreads>
  <launchSecurity type="sev">
    <dhCert>D</dhCert>
    <session>S</session>
    <cbitpos>47</cbitpos>
    <reducedPhysBits>1</reducedPhysBits>
    <policy>0x33</policy>
    <quoteGenerationService path="/q"/>
  </launchSecurity>
  <on_reboot>destroy</on_reboot>
  <iommufd enabled="yes" fdgroup="g"/>
</domain>"#;

fn on() -> Value {
    json!({"State": "on"})
}

/// `api.DomainSpec` of [`FULL_XML`], field by field from the Go struct definitions.
fn expected_spec() -> Value {
    let empty_name = json!({"Space": "", "Local": ""});
    json!({
        "XMLName": empty_name,
        "Type": "kvm",
        "XmlNS": "http://libvirt.org/schemas/domain/qemu/1.0",
        "Name": "ns_vm",
        "UUID": "11111111-2222-3333-4444-555555555555",
        "Memory": {"Value": 2147483648u64, "Unit": "b"},
        "CurrentMemory": {"Value": 1073741824u64, "Unit": "b"},
        "MaxMemory": {"Value": 8589934592u64, "Unit": "b", "Slots": 2},
        "MemoryBacking": {
            "HugePages": {"HugePage": [{"Size": "2", "Unit": "M", "NodeSet": "0"}]},
            "Source": {"Type": "memfd"},
            "Access": {"Mode": "shared"},
            "Allocation": {"Mode": "immediate"},
            "NoSharePages": {}
        },
        "OS": {
            "Firmware": "efi",
            "FirmwareInfo": {"Features": [{"Enabled": "yes", "Name": "secure-boot"}]},
            "Type": {"OS": "hvm", "Arch": "x86_64", "Machine": "q35"},
            "ACPI": {"Table": [{"Path": "/var/slic.bin", "Type": "slic"}]},
            "SMBios": {"Mode": "sysinfo"},
            "BootOrder": [{"Dev": "hd"}],
            "BootMenu": {"Enable": "yes", "Timeout": 1000},
            "BIOS": {"UseSerial": "yes"},
            "BootLoader": {"ReadOnly": "yes", "Secure": "yes", "Type": "pflash", "Path": "/usr/share/OVMF_CODE.fd"},
            "NVRam": {"Template": "/usr/share/OVMF_VARS.fd", "Format": "raw", "NVRam": "/var/run/vars.fd"},
            "Kernel": "/boot/vmlinuz",
            "Initrd": "/boot/initrd",
            "KernelArgs": "console=ttyS0"
        },
        "SysInfo": {
            "Type": "smbios",
            "System": [{"Name": "uuid", "Value": "abc"}],
            "BIOS": [{"Name": "vendor", "Value": "V"}],
            "BaseBoard": [{"Name": "manufacturer", "Value": "M"}],
            "Chassis": [{"Name": "asset", "Value": "A"}]
        },
        "Devices": {
            "Emulator": "", "Interfaces": null, "Channels": null, "HostDevices": null, "PanicDevices": null,
            "Controllers": null, "Video": null, "Graphics": null, "Ballooning": null, "Disks": null,
            "Inputs": null, "Serials": null, "Consoles": null, "Watchdogs": null, "Rng": null,
            "Filesystems": null, "Redirs": null, "SoundCards": null, "TPMs": null, "VSOCK": null,
            "Memory": null, "IOMMU": null
        },
        "Clock": {
            "Offset": "timezone",
            "Timezone": "Europe/Berlin",
            "Adjustment": "reset",
            "Timer": [
                {"Name": "hpet", "TickPolicy": "", "Present": "no", "Track": "", "Frequency": ""},
                {"Name": "tsc", "TickPolicy": "", "Present": "", "Track": "", "Frequency": "1000000"}
            ]
        },
        "Resource": {"Partition": "/machine"},
        "QEMUCmd": {"QEMUEnv": [{"Name": "A", "Value": "1"}], "QEMUArg": [{"Value": "-foo"}]},
        "Metadata": {"KubeVirt": {
            "UID": "uid-1",
            "GracePeriod": {
                "DeletionGracePeriodSeconds": 30,
                "DeletionTimestamp": "2024-05-01T08:00:00Z",
                "MarkedForGracefulShutdown": true
            },
            "Migration": {
                "UID": "m1",
                "StartTimestamp": "2024-05-01T10:00:00Z",
                "EndTimestamp": "2024-05-01T10:05:00Z",
                "Failed": true,
                "FailureReason": "r",
                "AbortStatus": "Aborted",
                "Mode": "PostCopy"
            },
            "Backup": {
                "Name": "b1", "Mode": "push", "SkipQuiesce": true,
                "StartTimestamp": "2024-05-01T11:00:00Z", "EndTimestamp": null,
                "Completed": false, "Failed": true, "BackupMsg": "m", "CheckpointName": "c",
                "Volumes": "v1,v2", "QuiesceStatus": "q"
            },
            "AccessCredential": {"Succeeded": true, "Message": "ok"},
            "MemoryDump": {
                "FileName": "f",
                "StartTimestamp": "2024-05-01T12:00:00Z",
                "EndTimestamp": "2024-05-01T12:01:00Z",
                "Completed": true,
                "Failed": false,
                "FailureReason": ""
            }
        }},
        "Features": {
            "ACPI": {},
            "APIC": {},
            "Hyperv": {
                "Mode": "custom",
                "Relaxed": on(),
                "VAPIC": on(),
                "Spinlocks": {"State": "on", "Retries": 8191},
                "VPIndex": on(),
                "Runtime": on(),
                "SyNIC": on(),
                "SyNICTimer": {"Direct": on(), "State": "on"},
                "Reset": on(),
                "VendorID": {"State": "on", "Value": "KVMKVMKVM"},
                "Frequencies": on(),
                "Reenlightenment": on(),
                "TLBFlush": {"Direct": on(), "Extended": on(), "State": "on"},
                "IPI": on(),
                "EVMCS": on()
            },
            "SMM": {},
            "KVM": {"Hidden": on(), "HintDedicated": on()},
            "PVSpinlock": {"State": "off"},
            "PMU": {"State": "off"},
            "VMPort": {"State": "off"}
        },
        "CPU": {
            "Mode": "host-model",
            "Model": "Skylake",
            "Features": [{"Name": "vmx", "Policy": "require"}],
            "Topology": {"Sockets": 2, "Cores": 1, "Threads": 1},
            "NUMA": {"Cells": [{
                "ID": "0", "CPUs": "0-1", "Memory": 1048576, "Unit": "KiB", "MemoryAccess": "shared",
                "Distances": {"Siblings": [{"ID": "0", "Value": 10}]}
            }]}
        },
        "VCPU": {"Placement": "static", "CPUs": 2},
        "VCPUs": {"VCPU": [{"ID": 0, "Enabled": "yes", "Hotpluggable": "no", "Order": 1}]},
        "CPUTune": {
            "VCPUPin": [{"VCPU": 0, "CPUSet": "1"}],
            "IOThreadPin": [{"IOThread": 1, "CPUSet": "2"}],
            "EmulatorPin": {"CPUSet": "3"}
        },
        "NUMATune": {
            "Memory": {"Mode": "strict", "NodeSet": "0"},
            "MemNodes": [{"CellID": 1, "Mode": "strict", "NodeSet": "1"}]
        },
        "IOThreads": {"IOThreads": 2},
        "LaunchSecurity": {
            "Type": "sev", "DHCert": "D", "Session": "S", "Cbitpos": "47", "ReducedPhysBits": "1",
            "Policy": "0x33", "QuoteGenerationService": {"Path": "/q"}
        },
        "OnReboot": "destroy",
        "IOMMUFD": {"XMLName": empty_name, "Enabled": "yes", "FDGroup": "g"}
    })
}

#[test]
fn full_domain_xml_is_the_round_trip_baseline() {
    let d = Domain::from_xml(FULL_XML).unwrap();
    let diffs = xmltree::diff(FULL_XML, &d.to_xml().unwrap(), 10).unwrap();
    assert!(
        diffs.is_empty(),
        "the model does not carry the test XML unchanged: {diffs:?}"
    );
}

#[test]
fn every_domain_level_field_has_go_name_order_and_zero_value() {
    let d = Domain::from_xml(FULL_XML).unwrap();
    let got = d.to_go();
    if let Some(diff) = first_difference(&expected_spec(), &got, "Spec") {
        panic!("{diff}");
    }
}

#[test]
fn go_json_reads_back_to_the_same_xml() {
    let env = from_go_json(
        &json!({"ObjectMeta": {"name": "vm", "namespace": "ns"}, "Spec": expected_spec()}),
    )
    .unwrap();
    // Timestamps come back in Go's JSON form (UTC, whole seconds); everything else unchanged.
    let expected_xml = FULL_XML
        .replace(
            "2024-05-01T10:00:00.123456789+02:00",
            "2024-05-01T08:00:00Z",
        )
        .replace("2024-05-01T10:05:00.5Z", "2024-05-01T10:05:00Z");
    let diffs = xmltree::diff(&expected_xml, &env.spec.to_xml().unwrap(), 10).unwrap();
    assert!(diffs.is_empty(), "{diffs:?}");
    assert_eq!(to_go_json(&env)["Spec"], expected_spec());
}

#[test]
fn empty_domain_has_every_go_field() {
    let got = to_go_json(&DomainEnvelope::new("ns", "vm", Domain::default()));
    let spec = got["Spec"].as_object().unwrap();
    let keys: Vec<&str> = spec.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "XMLName",
            "Type",
            "XmlNS",
            "Name",
            "UUID",
            "Memory",
            "CurrentMemory",
            "MaxMemory",
            "MemoryBacking",
            "OS",
            "SysInfo",
            "Devices",
            "Clock",
            "Resource",
            "QEMUCmd",
            "Metadata",
            "Features",
            "CPU",
            "VCPU",
            "VCPUs",
            "CPUTune",
            "NUMATune",
            "IOThreads",
            "LaunchSecurity",
            "OnReboot",
            "IOMMUFD"
        ]
    );
    for nil in [
        "CurrentMemory",
        "MaxMemory",
        "MemoryBacking",
        "SysInfo",
        "Clock",
        "Resource",
        "QEMUCmd",
        "Features",
    ] {
        assert_eq!(spec[nil], Value::Null, "{nil}");
    }
    for nil in [
        "VCPU",
        "VCPUs",
        "CPUTune",
        "NUMATune",
        "IOThreads",
        "LaunchSecurity",
        "IOMMUFD",
    ] {
        assert_eq!(spec[nil], Value::Null, "{nil}");
    }
    assert_eq!(spec["XmlNS"], "");
    assert_eq!(spec["UUID"], "");
    assert_eq!(spec["OnReboot"], "");
    assert_eq!(spec["Memory"], json!({"Value": 0, "Unit": ""}));
    assert_eq!(
        spec["CPU"],
        json!({"Mode": "", "Model": "", "Features": null, "Topology": null, "NUMA": null})
    );
    assert_eq!(
        spec["Metadata"],
        json!({"KubeVirt": {"UID": "", "GracePeriod": null, "Migration": null, "Backup": null,
            "AccessCredential": null, "MemoryDump": null}})
    );
    assert_eq!(got["ObjectMeta"], json!({"name": "vm", "namespace": "ns"}));
}
