package main

import (
	"errors"
	"flag"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	backupv1 "kubevirt.io/api/backup/v1alpha1"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
	cmdserver "kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/cmd-server"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/stats"
)

var errNotImplemented = errors.New("not implemented in the harness")

// The harness implements KubeVirt's launcher-side interface in full.
var _ virtwrap.DomainManager = &memManager{}

// memManager is a domain manager without libvirt: one domain in memory whose state follows the
// commands (sync -> Running, shutdown -> Shutoff/Shutdown, kill -> Shutoff/Destroyed, ...).
// Every call is printed as {"manager": NAME}.
type memManager struct {
	mu     sync.Mutex
	domain *api.Domain
}

func (m *memManager) note(name string) { emit(map[string]any{"manager": name}) }

func (m *memManager) setState(name string, s api.LifeCycle, r api.StateChangeReason) error {
	m.note(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.domain == nil {
		return errors.New("no domain defined")
	}
	m.domain.Status.Status = s
	m.domain.Status.Reason = r
	return nil
}

func (m *memManager) SyncVMI(vmi *v1.VirtualMachineInstance, _ bool, _ *cmdv1.VirtualMachineOptions) (*api.DomainSpec, error) {
	m.note("SyncVMI")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.domain == nil {
		d := api.NewMinimalDomainWithNS(vmi.Namespace, vmi.Name)
		d.Spec.Metadata.KubeVirt.UID = vmi.UID
		m.domain = d
	}
	if m.domain.Status.Status != api.Running && m.domain.Status.Status != api.Paused {
		m.domain.Status.Status = api.Running
		m.domain.Status.Reason = api.ReasonUnknown
	}
	spec := m.domain.Spec
	return &spec, nil
}

func (m *memManager) PauseVMI(*v1.VirtualMachineInstance) error {
	return m.setState("PauseVMI", api.Paused, api.ReasonPausedUser)
}
func (m *memManager) UnpauseVMI(*v1.VirtualMachineInstance) error {
	return m.setState("UnpauseVMI", api.Running, api.ReasonUnknown)
}
func (m *memManager) FreezeVMI(*v1.VirtualMachineInstance, int32) error { return errNotImplemented }
func (m *memManager) UnfreezeVMI(*v1.VirtualMachineInstance) error      { return errNotImplemented }
func (m *memManager) ResetVMI(*v1.VirtualMachineInstance) error {
	return m.setState("ResetVMI", api.Running, api.ReasonUnknown)
}
func (m *memManager) SoftRebootVMI(*v1.VirtualMachineInstance) error {
	return m.setState("SoftRebootVMI", api.Running, api.ReasonUnknown)
}
func (m *memManager) KillVMI(*v1.VirtualMachineInstance) error {
	return m.setState("KillVMI", api.Shutoff, api.ReasonDestroyed)
}
func (m *memManager) DeleteVMI(*v1.VirtualMachineInstance) error {
	m.note("DeleteVMI")
	m.mu.Lock()
	defer m.mu.Unlock()
	m.domain = nil
	return nil
}
func (m *memManager) SignalShutdownVMI(*v1.VirtualMachineInstance) error {
	return m.setState("SignalShutdownVMI", api.Shutoff, api.ReasonShutdown)
}
func (m *memManager) MarkGracefulShutdownVMI() { m.note("MarkGracefulShutdownVMI") }
func (m *memManager) ListAllDomains() ([]*api.Domain, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.domain == nil {
		return nil, nil
	}
	return []*api.Domain{m.domain.DeepCopy()}, nil
}
func (m *memManager) MigrateVMI(*v1.VirtualMachineInstance, *cmdclient.MigrationOptions) error {
	return errNotImplemented
}
func (m *memManager) PrepareMigrationTarget(*v1.VirtualMachineInstance, bool, *cmdv1.VirtualMachineOptions) error {
	return errNotImplemented
}
func (m *memManager) GetDomainStats() (*stats.DomainStats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.domain == nil {
		return nil, nil
	}
	return &stats.DomainStats{Name: m.domain.Spec.Name, Cpu: &stats.DomainStatsCPU{}}, nil
}
func (m *memManager) CancelVMIMigration(*v1.VirtualMachineInstance) error { return errNotImplemented }
func (m *memManager) GetGuestInfo() v1.VirtualMachineInstanceGuestAgentInfo {
	return v1.VirtualMachineInstanceGuestAgentInfo{}
}
func (m *memManager) GetUsers() []v1.VirtualMachineInstanceGuestOSUser      { return nil }
func (m *memManager) GetFilesystems() []v1.VirtualMachineInstanceFileSystem { return nil }
func (m *memManager) FinalizeVirtualMachineMigration(*v1.VirtualMachineInstance, *cmdv1.VirtualMachineOptions) error {
	return errNotImplemented
}
func (m *memManager) HotplugHostDevices(*v1.VirtualMachineInstance) error { return errNotImplemented }
func (m *memManager) InterfacesStatus() []api.InterfaceStatus             { return nil }
func (m *memManager) GetGuestOSInfo() *api.GuestOSInfo                    { return nil }
func (m *memManager) Exec(string, string, []string, int32) (string, error) {
	return "", errNotImplemented
}
func (m *memManager) GuestPing(string) error { return errNotImplemented }
func (m *memManager) MemoryDump(*v1.VirtualMachineInstance, string) error {
	return errNotImplemented
}
func (m *memManager) BackupVirtualMachine(*v1.VirtualMachineInstance, *backupv1.BackupOptions) error {
	return errNotImplemented
}
func (m *memManager) RedefineCheckpoint(*v1.VirtualMachineInstance, *backupv1.BackupCheckpoint) (bool, error) {
	return false, errNotImplemented
}
func (m *memManager) GetQemuVersion() (string, error) {
	m.note("GetQemuVersion")
	return "9.2.0", nil
}
func (m *memManager) UpdateVCPUs(*v1.VirtualMachineInstance, *cmdv1.VirtualMachineOptions) error {
	return errNotImplemented
}
func (m *memManager) GetSEVInfo() (*v1.SEVPlatformInfo, error) { return nil, errNotImplemented }
func (m *memManager) GetLaunchMeasurement(*v1.VirtualMachineInstance) (*v1.SEVMeasurementInfo, error) {
	return nil, errNotImplemented
}
func (m *memManager) InjectLaunchSecret(*v1.VirtualMachineInstance, *v1.SEVSecretOptions) error {
	return errNotImplemented
}
func (m *memManager) UpdateGuestMemory(*v1.VirtualMachineInstance) error { return errNotImplemented }
func (m *memManager) GetDomainDirtyRateStats(time.Duration) (*stats.DomainStatsDirtyRate, error) {
	return nil, errNotImplemented
}
func (m *memManager) GetScreenshot(*v1.VirtualMachineInstance) (*cmdv1.ScreenshotResponse, error) {
	return nil, errNotImplemented
}
func (m *memManager) GetGuestAgentVersion() string        { return "" }
func (m *memManager) GetAgentData(string) (string, error) { return "", errNotImplemented }

func serveLauncher(args []string) error {
	fs := flag.NewFlagSet("serve-launcher", flag.ExitOnError)
	socket := fs.String("socket", "", "where to serve the cmd socket")
	fs.Parse(args)
	if *socket == "" {
		return errors.New("--socket is required")
	}
	stop := make(chan struct{})
	done, err := cmdserver.RunServer(*socket, &memManager{}, stop, cmdserver.NewServerOptions(true))
	if err != nil {
		return err
	}
	emit(map[string]any{"serving": *socket})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	close(stop)
	<-done
	return nil
}
