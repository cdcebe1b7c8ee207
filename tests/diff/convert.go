package main

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	k8sv1 "k8s.io/api/core/v1"

	v1 "kubevirt.io/api/core/v1"

	ephemeraldisk "kubevirt.io/kubevirt/pkg/ephemeral-disk"
	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
	"kubevirt.io/kubevirt/pkg/network/domainspec"
	"kubevirt.io/kubevirt/pkg/os/disk"
	kutil "kubevirt.io/kubevirt/pkg/util"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/arch"
	convertertypes "kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/types"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/efi"
)

const ovmfDir = "/usr/share/edk2/ovmf"

// oracleTopology is the oracle node: 16 CPUs (0-15) in one NUMA cell with SMT siblings
// (2k, 2k+1), 64 GiB, pages 4K x 16777216, 2M x 1024, 1G x 4, distance 10.
func oracleTopology() *cmdv1.Topology {
	cell := &cmdv1.Cell{
		Id:     0,
		Memory: &cmdv1.Memory{Amount: 64 * 1024 * 1024, Unit: "KiB"},
		Pages: []*cmdv1.Pages{
			{Count: 16777216, Unit: "KiB", Size: 4},
			{Count: 1024, Unit: "KiB", Size: 2048},
			{Count: 4, Unit: "KiB", Size: 1048576},
		},
		Distances: []*cmdv1.Sibling{{Id: 0, Value: 10}},
	}
	for c := uint32(0); c < 16; c++ {
		cell.Cpus = append(cell.Cpus, &cmdv1.CPU{Id: c, Siblings: []uint32{c &^ 1, c | 1}})
	}
	return &cmdv1.Topology{NumaCells: []*cmdv1.Cell{cell}}
}

// efiConfiguration is what virt-launcher selects with every OVMF file of the oracle present and
// firmware auto-selection off.
func efiConfiguration(vmi *v1.VirtualMachineInstance) *convertertypes.EFIConfiguration {
	if !vmi.IsBootloaderEFI() {
		return nil
	}
	sb := vmi.Spec.Domain.Firmware.Bootloader.EFI.SecureBoot
	secureBoot := sb == nil || *sb
	tdx := kutil.IsTDXVMI(vmi)
	path := func(f string) string { return ovmfDir + "/" + f }
	var code, vars string
	switch {
	case kutil.IsSEVSNPVMI(vmi):
		if !secureBoot {
			code = path(efi.EFICodeSNP)
		}
	case kutil.IsSEVVMI(vmi):
		if !secureBoot {
			code, vars = path(efi.EFICodeSEV), path(efi.EFIVarsSEV)
		}
	case tdx:
		if secureBoot {
			code = path(efi.EFICodeTDXSecureBoot)
		} else {
			code = path(efi.EFICodeTDX)
		}
	case secureBoot:
		code, vars = path(efi.EFICodeSecureBoot), path(efi.EFIVarsSecureBoot)
	default:
		code, vars = path(efi.EFICodeSecureBoot), path(efi.EFIVars)
	}
	return &convertertypes.EFIConfiguration{EFICode: code, EFIVars: vars, SecureLoader: secureBoot && !tdx}
}

// converterContext is the launcher's view of the oracle node (README "Converter context").
// cpuLimit is the compute container's CPU limit (the pod's cpuset for dedicated CPUs).
// bindings are the cluster's network binding plugins (the handler derives each interface's
// domain attachment from them).
func converterContext(vmi *v1.VirtualMachineInstance, cpuLimit int64, bindings map[string]v1.InterfaceBindingPlugin) *convertertypes.ConverterContext {
	isBlockPVC, isBlockDV := map[string]bool{}, map[string]bool{}
	disksInfo := map[string]*disk.DiskInfo{}
	for _, vol := range vmi.Spec.Volumes {
		switch {
		case vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil:
			isBlockPVC[vol.Name] = false
		case vol.DataVolume != nil:
			isBlockDV[vol.Name] = false
		}
		if vol.ContainerDisk != nil {
			disksInfo[vol.Name] = &disk.DiskInfo{Format: "qcow2"}
		}
	}
	hotplug, permanent := map[string]v1.VolumeStatus{}, map[string]v1.VolumeStatus{}
	for _, st := range vmi.Status.VolumeStatus {
		if st.HotplugVolume != nil {
			hotplug[st.Name] = st
		} else {
			permanent[st.Name] = st
		}
	}
	var cpuSet []int
	if vmi.IsCPUDedicated() {
		for i := 0; i < int(cpuLimit); i++ {
			cpuSet = append(cpuSet, i)
		}
	}
	return &convertertypes.ConverterContext{
		Architecture:              arch.NewConverter("amd64"),
		VirtualMachine:            vmi,
		AllowEmulation:            true,
		HypervisorDeviceAvailable: true,
		HostArchitecture:          runtime.GOARCH,
		CPUSet:                    cpuSet,
		IsBlockPVC:                isBlockPVC,
		IsBlockDV:                 isBlockDV,
		EFIConfiguration:          efiConfiguration(vmi),
		UseVirtioTransitional:     vmi.Spec.Domain.Devices.UseVirtioTransitional != nil && *vmi.Spec.Domain.Devices.UseVirtioTransitional,
		PermanentVolumes:          permanent,
		HotplugVolumes:            hotplug,
		EphemeraldiskCreator:      ephemeraldisk.NewEphemeralDiskCreator(ephemeralDiskDir + "/disk-data"),
		UseLaunchSecuritySEV:      kutil.IsSEVVMI(vmi),
		UseLaunchSecurityTDX:      kutil.IsTDXVMI(vmi),
		UseLaunchSecurityPV:       kutil.IsSecureExecutionVMI(vmi),
		FreePageReporting:         freePageReporting(vmi),
		SerialConsoleLog:          serialConsoleLog(vmi),
		BochsForEFIGuests:         true,
		SMBios:                    &cmdv1.SMBios{Family: "KubeVirt", Manufacturer: "KubeVirt", Product: "None"},
		Topology:                  oracleTopology(),
		MemBalloonStatsPeriod:     10,
		DisksInfo:                 disksInfo,
		HypervisorName:            "kvm",
		DomainAttachmentByInterfaceName: domainspec.DomainAttachmentByInterfaceName(
			vmi.Spec.Domain.Devices.Interfaces, bindings),
	}
}

// The launcher's rules (manager.go) with the cluster's defaults (neither disabled).
func freePageReporting(vmi *v1.VirtualMachineInstance) bool {
	b := vmi.Spec.Domain.Devices.AutoattachMemBalloon
	return !((b != nil && !*b) || vmi.IsHighPerformanceVMI() ||
		vmi.GetAnnotations()[v1.FreePageReportingDisabledAnnotation] == "true")
}

func serialConsoleLog(vmi *v1.VirtualMachineInstance) bool {
	l := vmi.Spec.Domain.Devices.LogSerialConsole
	return l == nil || *l
}

// cpuLimitOf is the compute container's CPU limit. When the pod could not be rendered (no
// launcher would exist), the converter still runs, with the limit such a pod would have had,
// counted as the pod renderer's dedicated-CPU rule counts it: one CPU per vCPU, one per
// supplemental-pool IO thread, and one (two with the even-parity annotation when the count is
// even) for an isolated emulator thread.
func cpuLimitOf(pod *k8sv1.Pod, vmi *v1.VirtualMachineInstance) int64 {
	if pod == nil {
		cpu := vmi.Spec.Domain.CPU
		if cpu == nil {
			return 1
		}
		n := int64(1)
		for _, f := range []uint32{cpu.Cores, cpu.Sockets, cpu.Threads} {
			if f > 0 {
				n *= int64(f)
			}
		}
		ioThreads, additional := int64(0), int64(0)
		if t := vmi.Spec.Domain.IOThreads; t != nil && t.SupplementalPoolThreadCount != nil {
			ioThreads = int64(*t.SupplementalPoolThreadCount)
			if p := vmi.Spec.Domain.IOThreadsPolicy; p != nil && *p == v1.IOThreadsPolicySupplementalPool {
				additional = ioThreads
			}
		}
		n += ioThreads
		if cpu.IsolateEmulatorThread {
			_, parity := vmi.Annotations[v1.EmulatorThreadCompleteToEvenParity]
			if parity && (n+additional)%2 == 0 {
				n += 2
			} else {
				n++
			}
		}
		return n
	}
	if q, ok := pod.Spec.Containers[0].Resources.Limits[k8sv1.ResourceCPU]; ok {
		return q.Value()
	}
	return 0
}

// prepare is what happens to the defaulted VMI before conversion in the oracle: the controller
// would have allocated a VSOCK CID; 3 stands in for it.
func prepare(vmi *v1.VirtualMachineInstance) {
	if a := vmi.Spec.Domain.Devices.AutoattachVSOCK; a != nil && *a && vmi.Status.VSOCKCID == nil {
		cid := uint32(3)
		vmi.Status.VSOCKCID = &cid
	}
}

// domainXML: converter -> libvirt-domain defaulting -> the launcher's marshalling.
func domainXML(vmi *v1.VirtualMachineInstance, pod *k8sv1.Pod, cfg *virtconfig.ClusterConfig) (string, error) {
	prepare(vmi)
	c := converterContext(vmi, cpuLimitOf(pod, vmi), cfg.GetNetworkBindings())
	domain := &api.Domain{}
	if err := converter.Convert_v1_VirtualMachineInstance_To_api_Domain(vmi, domain, c); err != nil {
		return "", err
	}
	api.NewDefaulter(c.Architecture.GetArchitecture()).SetObjectDefaults_Domain(domain)
	return xmlIndent(domain.Spec)
}

// benchConvert times n conversions of the defaulted VMI in file (the loop issue 16 measures:
// convert, libvirt-domain defaulting, xml.MarshalIndent) and prints the median and the
// allocations per conversion.
func benchConvert(file string, n int, out io.Writer) error {
	once, err := benchSetup(file)
	if err != nil {
		return err
	}
	w, err := benchWindow(once, n)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "conversions: %d\n", n)
	fmt.Fprintf(out, "median ns/conversion: %d\n", w.medianNs)
	fmt.Fprintf(out, "allocations/conversion: %d\n", w.allocs)
	fmt.Fprintf(out, "bytes/conversion: %d\n", w.bytes)
	return nil
}

// benchServe is benchConvert as a server, so a driver can interleave short windows of both
// converters without paying this process's start (seconds: KubeVirt's package initialisation)
// each time: every line "N" on in runs N conversions and answers one line "MEDIAN_NS ALLOCS".
func benchServe(file string, in io.Reader, out io.Writer) error {
	once, err := benchSetup(file)
	if err != nil {
		return err
	}
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(lines.Text()))
		if err != nil || n <= 0 {
			return fmt.Errorf("bench-convert-serve: each line must be a positive integer, got %q", lines.Text())
		}
		w, err := benchWindow(once, n)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%d %d\n", w.medianNs, w.allocs)
	}
	return lines.Err()
}

// benchSetup reads the defaulted VMI in file and returns one conversion of it (run once here,
// so bad input fails before any timing).
func benchSetup(file string) (func() error, error) {
	body, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(body, vmi); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	prepare(vmi)
	// The pod's CPU limit is the dedicated CPU set, as for the JSON-lines answers.
	cfg := newHarness().clusterConfig(nil, nil)
	pod, err := renderPod(vmi.DeepCopy(), cfg)
	if err != nil {
		return nil, fmt.Errorf("pod: %w", err)
	}
	cpuLimit, bindings := cpuLimitOf(pod, vmi), cfg.GetNetworkBindings()
	once := func() error {
		c := converterContext(vmi, cpuLimit, bindings)
		domain := &api.Domain{}
		if err := converter.Convert_v1_VirtualMachineInstance_To_api_Domain(vmi, domain, c); err != nil {
			return err
		}
		api.NewDefaulter(c.Architecture.GetArchitecture()).SetObjectDefaults_Domain(domain)
		_, err := xml.MarshalIndent(domain.Spec, "", "\t")
		return err
	}
	if err := once(); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	return once, nil
}

// window is what n timed conversions measured.
type window struct {
	medianNs      int64
	allocs, bytes uint64
}

// benchWindow times n conversions: the median of their times and the allocations (and bytes)
// per conversion.
func benchWindow(once func() error, n int) (window, error) {
	times := make([]time.Duration, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range times {
		start := time.Now()
		if err := once(); err != nil {
			return window{}, err
		}
		times[i] = time.Since(start)
	}
	runtime.ReadMemStats(&after)
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	return window{
		medianNs: times[n/2].Nanoseconds(),
		allocs:   (after.Mallocs - before.Mallocs) / uint64(n),
		bytes:    (after.TotalAlloc - before.TotalAlloc) / uint64(n),
	}, nil
}
