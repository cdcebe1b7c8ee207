package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/json"
)

// floor runs libvirt's own define + start of a domain XML in the launcher pod set-up: kvrs's
// virt-launcher-monitor as the pod's PID 1 (it reaps what libvirt leaves to PID 1, such as its
// QEMU probe process, which libvirt waits for), running the `libvirt-floor` example of
// bins/virt-launcher in place of the launcher. It prints the steps it timed as
// `{"figures": {...}}` (kind "libvirt"): connect_s, probe_define_s (the first define on a fresh
// daemon, which probes QEMU), probe_s and define_s (that define split by defining again once
// probed), start_s (the create call until its reply), started_event_s (until the Started event),
// floor_s = probe_define_s + start_s: what SyncVirtualMachine -> Running cannot go below when the
// probe starts with the Sync, the launcher being connected before the Sync arrives.
func floor(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	var podScript, monitor, bin, guest, xmlFile, work string
	fs.StringVar(&podScript, "pod-script", "", "scripts/launcher-pod-harness.sh")
	fs.StringVar(&monitor, "monitor", "", "kvrs's virt-launcher-monitor (the pod's PID 1)")
	fs.StringVar(&bin, "floor", "", "the libvirt-floor binary (bins/virt-launcher/examples)")
	fs.StringVar(&guest, "guest", "", "the guest images (kvrs-guest-images DIR)")
	fs.StringVar(&xmlFile, "domain-xml", "", "the domain XML the launcher defined (readable by UID 107)")
	fs.StringVar(&work, "work", os.TempDir(), "where the pod directory is made")
	fs.Parse(args)
	if podScript == "" || monitor == "" || bin == "" || guest == "" || xmlFile == "" {
		return errors.New("--pod-script, --monitor, --floor, --guest and --domain-xml are required")
	}
	pod, err := os.MkdirTemp(work, "kvrs-cmp-libvirt-")
	if err != nil {
		return err
	}
	if err := preparePod(pod, guest); err != nil {
		return fmt.Errorf("pod directory: %w", err)
	}
	podLog := pod + ".log"
	emit(map[string]any{"pod": pod, "log": podLog, "kind": "libvirt"})
	logFile, err := os.Create(podLog)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := podCommand(podScript, pod, "", []string{monitor, xmlFile})
	cmd.Env = append(cmd.Env, "KVRS_VIRT_LAUNCHER="+bin)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the pod: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(120 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		err = errors.New("libvirt-floor did not finish within 120 s")
	}
	if err != nil {
		emit(map[string]any{"error": err.Error(), "log_tail": tailFile(podLog, 6000)})
		return err
	}
	b, err := os.ReadFile(podLog)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, `{"libvirt_floor"`) {
			continue
		}
		var out struct {
			F map[string]float64 `json:"libvirt_floor"`
		}
		if err := json.Unmarshal([]byte(l), &out); err != nil {
			return fmt.Errorf("%s: %w", podLog, err)
		}
		f := out.F
		figures := map[string]any{"kind": "libvirt"}
		for _, k := range []string{"connect", "probe_define", "probe", "define", "start", "started_event"} {
			figures[k+"_s"] = f[k+"_ms"] / 1000
		}
		figures["floor_s"] = (f["probe_define_ms"] + f["start_ms"]) / 1000
		emit(map[string]any{"figures": figures})
		_ = os.RemoveAll(pod)
		return nil
	}
	err = fmt.Errorf("%s has no libvirt_floor line", podLog)
	emit(map[string]any{"error": err.Error(), "log_tail": tailFile(podLog, 6000)})
	return err
}

// podCommand is the launcher pod's container command under launcher-pod-harness.sh, with the
// environment KubeVirt's pod template gives the compute container.
func podCommand(podScript, pod, kubevirtRoot string, command []string) *exec.Cmd {
	scriptArgs := []string{podScript, "--pod", pod, "--state-dir", pod + ".state"}
	if kubevirtRoot != "" {
		scriptArgs = append(scriptArgs, "--kubevirt-root", kubevirtRoot)
	}
	scriptArgs = append(scriptArgs, "--")
	scriptArgs = append(scriptArgs, command...)
	cmd := exec.Command("bash", scriptArgs...)
	cmd.Env = append(os.Environ(),
		"XDG_RUNTIME_DIR=/var/run",
		"XDG_CONFIG_HOME=/var/run/kubevirt-private",
		"XDG_CACHE_HOME=/var/run/kubevirt-private",
		"HOME=/var/run/kubevirt-private",
	)
	return cmd
}
