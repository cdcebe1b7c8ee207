package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/log"

	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
	notifyserver "kubevirt.io/kubevirt/pkg/virt-handler/notify-server"
	"kubevirt.io/kubevirt/pkg/virt-handler/notify-server/pipe"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
)

// The guest's /init prints this once it runs (kvrs_test_guest::BOOT_MARKER).
const bootMarker = "KVRS-E2E: init running"

// qemuUser is KubeVirt's non-root launcher user and group.
const qemuUser = 107

type options struct {
	kind, podScript, monitor, kubevirtRoot, guest, vmiFile, work string
	poll, syncDelay                                              time.Duration
}

// eventTimes records when the notify server received each domain status.
type eventTimes struct {
	sync.Mutex
	seen []seenEvent
}

type seenEvent struct {
	status api.LifeCycle
	at     time.Time
}

// sawAfter returns when the first event with status s arrived after t.
func (e *eventTimes) sawAfter(s api.LifeCycle, t time.Time) (time.Time, bool) {
	e.Lock()
	defer e.Unlock()
	for _, ev := range e.seen {
		if ev.status == s && ev.at.After(t) {
			return ev.at, true
		}
	}
	return time.Time{}, false
}

func measure(args []string) error {
	fs := flag.NewFlagSet("measure", flag.ExitOnError)
	var o options
	fs.StringVar(&o.kind, "kind", "", "kubevirt or kvrs (a label; the binaries decide)")
	fs.StringVar(&o.podScript, "pod-script", "", "scripts/launcher-pod-harness.sh")
	fs.StringVar(&o.monitor, "monitor", "", "the virt-launcher-monitor binary the pod runs")
	fs.StringVar(&o.kubevirtRoot, "kubevirt-root", "", "KubeVirt's launcher image files (usr/bin/virt-launcher, ...), for --kind kubevirt")
	fs.StringVar(&o.guest, "guest", "", "the guest images (kvrs-guest-images DIR)")
	fs.StringVar(&o.vmiFile, "vmi", "", "the VMI to sync, kubevirt.io/v1 JSON (defaults applied)")
	fs.StringVar(&o.work, "work", os.TempDir(), "where the pod directory is made")
	fs.DurationVar(&o.poll, "poll", 20*time.Millisecond, "the interval of every wait, the same for both kinds")
	fs.DurationVar(&o.syncDelay, "sync-delay", 0, "how long after launcher-sock answers the SyncVirtualMachine is sent (0: at once)")
	fs.Parse(args)
	if o.kind != "kubevirt" && o.kind != "kvrs" {
		return fmt.Errorf("--kind %q: want kubevirt or kvrs", o.kind)
	}
	if o.podScript == "" || o.monitor == "" || o.guest == "" || o.vmiFile == "" {
		return errors.New("--pod-script, --monitor, --guest and --vmi are required")
	}
	if o.kind == "kubevirt" && o.kubevirtRoot == "" {
		return errors.New("--kind kubevirt needs --kubevirt-root")
	}
	raw, err := os.ReadFile(o.vmiFile)
	if err != nil {
		return err
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(raw, vmi); err != nil {
		return fmt.Errorf("%s: %w", o.vmiFile, err)
	}
	if vmi.Name == "" || vmi.Namespace == "" || vmi.UID == "" {
		return fmt.Errorf("%s: metadata.name, namespace and uid are required", o.vmiFile)
	}

	pod, err := os.MkdirTemp(o.work, "kvrs-cmp-"+o.kind+"-")
	if err != nil {
		return err
	}
	if err := preparePod(pod, o.guest); err != nil {
		return fmt.Errorf("pod directory: %w", err)
	}
	podLog := pod + ".log"
	emit(map[string]any{"pod": pod, "log": podLog, "kind": o.kind})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := &eventTimes{}
	stopNotify, err := startNotify(ctx, filepath.Join(pod, "kubevirt/domain-notify-pipe.sock"), vmi, events)
	if err != nil {
		return fmt.Errorf("notify server: %w", err)
	}
	defer stopNotify()

	figures, err := runPod(o, vmi, pod, podLog, events)
	if err != nil {
		emit(map[string]any{"error": err.Error(), "log_tail": tailFile(podLog, 6000)})
		return err
	}
	figures["kind"] = o.kind
	emit(map[string]any{"figures": figures})
	_ = os.RemoveAll(pod)
	return nil
}

// preparePod makes a pod's /run: KubeVirt's directories, the kernel-boot artifacts and the
// container disk where both launchers look for them, all handed to the qemu user.
func preparePod(pod, guest string) error {
	// The pod's emptyDirs: virt-controller mounts one at each of these (libvirt-runtime at
	// /var/run/libvirt).
	for _, sub := range []string{"kubevirt/container-disks/kernel-boot", "kubevirt/sockets", "kubevirt-private", "kubevirt-ephemeral-disks", "libvirt"} {
		if err := os.MkdirAll(filepath.Join(pod, sub), 0o755); err != nil {
			return err
		}
	}
	// kvrs-guest-images names each image's directory after its reference (with its version).
	for _, c := range [][2]string{
		{"*/boot/vmlinuz", "kubevirt/container-disks/kernel-boot/vmlinuz"},
		{"*/boot/initramfs.gz", "kubevirt/container-disks/kernel-boot/initramfs.gz"},
		{"*/disk/disk.qcow2", "kubevirt/container-disks/disk_0.img"},
	} {
		found, _ := filepath.Glob(filepath.Join(guest, c[0]))
		if len(found) != 1 {
			return fmt.Errorf("want exactly one %s in %s (the output of kvrs-guest-images), found %d", c[0], guest, len(found))
		}
		if err := copyFile(found[0], filepath.Join(pod, c[1])); err != nil {
			return err
		}
	}
	if err := os.Chmod(pod, 0o755); err != nil {
		return err
	}
	return filepath.Walk(pod, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, qemuUser, qemuUser)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// startNotify runs KubeVirt's notify server in a private share dir and KubeVirt's notify pipe
// from the pod's domain-notify-pipe.sock to it, as virt-handler does for each launcher pod
// (tests/mixed/drive.go does the same for the mixed-fleet tests).
func startNotify(ctx context.Context, notifySocket string, vmi *v1.VirtualMachineInstance, times *eventTimes) (func(), error) {
	shareDir, err := os.MkdirTemp("", "kvrs-cmp-handler-")
	if err != nil {
		return nil, err
	}
	events := make(chan watch.Event, 100)
	recorder := record.NewFakeRecorder(100)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := store.Add(vmi); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	serverDone := make(chan error, 1)
	go func() { serverDone <- notifyserver.RunServer(shareDir, stop, events, recorder, store) }()
	go func() {
		for ev := range events {
			if d, ok := ev.Object.(*api.Domain); ok {
				times.Lock()
				times.seen = append(times.seen, seenEvent{d.Status.Status, time.Now()})
				times.Unlock()
				emit(map[string]any{"event": string(ev.Type), "status": string(d.Status.Status), "reason": string(d.Status.Reason)})
			}
		}
	}()
	go func() {
		for range recorder.Events {
		}
	}()
	handlerSock := filepath.Join(shareDir, "domain-notify.sock")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(handlerSock); err == nil {
			break
		}
		select {
		case err := <-serverDone:
			return nil, fmt.Errorf("notify server exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("notify server did not create %s", handlerSock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = os.Remove(notifySocket)
	listener, err := net.Listen("unix", notifySocket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", notifySocket, err)
	}
	if err := os.Chown(notifySocket, qemuUser, qemuUser); err != nil {
		return nil, err
	}
	connect := pipe.NewConnectToNotifyFunc(shareDir)
	go pipe.Pipe(ctx, pipe.ChanFromListener(ctx, log.Log, listener), func(c net.Conn) {
		pipe.Proxy(log.Log, c, connect)
	})
	return func() {
		close(stop)
		_ = os.RemoveAll(shareDir)
	}, nil
}

// monitorArgs are the flags virt-controller's pod template passes to virt-launcher-monitor
// (--allow-emulation: this machine has no usable /dev/kvm for UID 107).
func monitorArgs(vmi *v1.VirtualMachineInstance) []string {
	return []string{
		"--qemu-timeout", "240s",
		"--name", vmi.Name, "--uid", string(vmi.UID), "--namespace", vmi.Namespace,
		"--kubevirt-share-dir", "/var/run/kubevirt",
		"--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
		"--container-disk-dir", "/var/run/kubevirt/container-disks",
		"--grace-period-seconds", "45", "--hook-sidecars", "0",
		"--ovmf-path", "/usr/share/edk2/ovmf",
		"--hypervisor", "kvm", "--run-as-nonroot", "--allow-emulation",
	}
}

// waitUntil polls ok every interval until it returns true or timeout passes.
func waitUntil(what string, interval, timeout time.Duration, exited <-chan struct{}, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		select {
		case <-exited:
			return fmt.Errorf("the pod exited while waiting for %s", what)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s within %s", what, timeout)
		}
		time.Sleep(interval)
	}
	return nil
}

func runPod(o options, vmi *v1.VirtualMachineInstance, pod, podLog string, events *eventTimes) (map[string]any, error) {
	logFile, err := os.Create(podLog)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := podCommand(o.podScript, pod, o.kubevirtRoot, append([]string{o.monitor}, monitorArgs(vmi)...))
	cmd.Stdout, cmd.Stderr = logFile, logFile

	started := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the pod: %w", err)
	}
	exited := make(chan struct{})
	var exitErr error
	var exitedAt time.Time
	go func() {
		exitErr = cmd.Wait()
		exitedAt = time.Now()
		close(exited)
	}()
	// Whatever happens below, the pod does not outlive the run: SIGTERM reaches unshare, whose
	// --kill-child takes the pod's PID namespace down.
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
	}()

	socket := filepath.Join(pod, "kubevirt/sockets/launcher-sock")
	if err := waitUntil("launcher-sock", o.poll, 60*time.Second, exited, func() bool {
		_, err := os.Stat(socket)
		return err == nil
	}); err != nil {
		return nil, err
	}
	socketSeen := time.Now()
	execAt, err := execTime(podLog)
	if err != nil {
		return nil, err
	}
	ready := socketSeen.Sub(execAt)
	podSetup := execAt.Sub(started)

	client, err := cmdclient.NewClient(socket)
	if err != nil {
		return nil, fmt.Errorf("NewClient: %w", err)
	}
	defer client.Close()
	if err := client.Ping(); err != nil {
		return nil, fmt.Errorf("Ping: %w", err)
	}

	time.Sleep(o.syncDelay)
	syncStart := time.Now()
	if err := client.SyncVirtualMachine(vmi, &cmdv1.VirtualMachineOptions{}); err != nil {
		return nil, fmt.Errorf("SyncVirtualMachine: %w", err)
	}
	syncReturn := time.Since(syncStart)
	if err := waitUntil("domain Running (GetDomain)", o.poll, 120*time.Second, exited, func() bool {
		d, exists, err := client.GetDomain()
		return err == nil && exists && d.Status.Status == api.Running
	}); err != nil {
		return nil, err
	}
	syncToRunning := time.Since(syncStart)
	running := time.Now()
	var notifyRunning time.Time
	if err := waitUntil("the Running domain event", o.poll, 30*time.Second, exited, func() bool {
		t, ok := events.sawAfter(api.Running, syncStart)
		notifyRunning = t
		return ok
	}); err != nil {
		return nil, err
	}

	serial := filepath.Join(pod, "kubevirt-private", string(vmi.UID), "virt-serial0-log")
	if err := waitUntil("the guest's boot marker in "+serial, o.poll, 180*time.Second, exited, func() bool {
		b, err := os.ReadFile(serial)
		return err == nil && strings.Contains(string(b), bootMarker)
	}); err != nil {
		return nil, err
	}
	boot := time.Since(running)
	rss := podRSS(cmd.Process.Pid)

	killStart := time.Now()
	if err := client.KillVirtualMachine(vmi); err != nil {
		return nil, fmt.Errorf("KillVirtualMachine: %w", err)
	}
	if err := waitUntil("domain Shutoff after Kill (GetDomain)", o.poll, 60*time.Second, exited, func() bool {
		d, exists, err := client.GetDomain()
		return err == nil && (!exists || d.Status.Status == api.Shutoff)
	}); err != nil {
		return nil, err
	}
	killToShutoff := time.Since(killStart)
	// virt-handler deletes the domain once its domain informer (these events) shows it stopped;
	// the launcher then exits.
	if err := waitUntil("the Shutoff domain event after Kill", o.poll, 30*time.Second, exited, func() bool {
		_, ok := events.sawAfter(api.Shutoff, killStart)
		return ok
	}); err != nil {
		return nil, err
	}
	// KubeVirt's launcher exits as soon as its domain is gone, and its reply to DeleteDomain can
	// be lost with the connection (gRPC Unavailable, EOF). The pod's clean exit below then says
	// the delete was done; any other error fails the run.
	if err := client.DeleteDomain(vmi); err != nil && !strings.Contains(err.Error(), "code = Unavailable") {
		return nil, fmt.Errorf("DeleteDomain: %w", err)
	}
	select {
	case <-exited:
	case <-time.After(120 * time.Second):
		return nil, errors.New("the pod did not exit within 120 s of DeleteDomain")
	}
	if exitErr != nil {
		return nil, fmt.Errorf("the pod exited with %v", exitErr)
	}

	figures := map[string]any{
		"ready_s":           ready.Seconds(),
		"pod_setup_s":       podSetup.Seconds(),
		"sync_return_s":     syncReturn.Seconds(),
		"sync_to_running_s": syncToRunning.Seconds(),
		"notify_running_s":  notifyRunning.Sub(syncStart).Seconds(),
		"boot_s":            boot.Seconds(),
		"kill_to_shutoff_s": killToShutoff.Seconds(),
		"kill_to_exit_s":    exitedAt.Sub(killStart).Seconds(),
		"sync_start_unix":   float64(syncStart.UnixNano()) / 1e9,
		"sync_delay_s":      o.syncDelay.Seconds(),
	}
	for k, v := range rss {
		figures["rss_"+k+"_kib"] = v
	}
	return figures, nil
}

// podRSS sums VmRSS (KiB) of the pod's processes — the descendants of pid — by role: monitor,
// launcher, libvirtd (libvirtd or virtqemud), virtlogd, qemu.
func podRSS(pid int) map[string]uint64 {
	children := map[int][]int{}
	comm := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
		s := string(stat)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		children[ppid] = append(children[ppid], p)
		comm[p] = s[open+1 : close]
	}
	out := map[string]uint64{"monitor": 0, "launcher": 0, "libvirtd": 0, "virtlogd": 0, "qemu": 0}
	var walk func(int)
	walk = func(p int) {
		role := ""
		switch c := comm[p]; {
		case strings.HasPrefix(c, "virt-launcher-m"):
			role = "monitor"
		case c == "virt-launcher":
			role = "launcher"
		case c == "libvirtd" || c == "virtqemud":
			role = "libvirtd"
		case c == "virtlogd":
			role = "virtlogd"
		case strings.HasPrefix(c, "qemu-system"):
			role = "qemu"
		}
		if role != "" {
			out[role] += vmRSS(p)
		}
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return out
}

func vmRSS(pid int) uint64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// execTime reads when launcher-pod-harness.sh exec'd the monitor (its "exec at" line).
func execTime(podLog string) (time.Time, error) {
	b, err := os.ReadFile(podLog)
	if err != nil {
		return time.Time{}, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "launcher-pod-harness.sh: exec at "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("%s: bad exec line %q: %w", podLog, l, err)
			}
			sec := int64(f)
			return time.Unix(sec, int64((f-float64(sec))*1e9)), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s has no \"exec at\" line from launcher-pod-harness.sh", podLog)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
