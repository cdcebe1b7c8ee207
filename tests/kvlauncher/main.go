// Command kvrs-kvlauncher measures one launcher pod — KubeVirt v1.9.0's own virt-launcher or
// kvrs's — the same way for both, for benches/compare-launchers.sh and tests/mixed_fleet.rs:
//
//	kvrs-kvlauncher measure --kind kubevirt|kvrs --pod-script scripts/launcher-pod-harness.sh
//	    --monitor PATH [--kubevirt-root DIR] --guest DIR --vmi FILE.json [--work DIR] [--poll 20ms]
//	    [--sync-delay 0s]
//
// The driver is KubeVirt's handler side for both launchers: its cmd client (pkg/virt-handler/
// cmd-client) and its notify server behind its notify pipe (pkg/virt-handler/notify-server), as
// virt-handler runs them for each pod. The pod is the same for both: a fresh pod directory bound
// over /run, a private mount + PID namespace, UID 107 with NET_BIND_SERVICE (as KubeVirt's
// compute container), the kvrs-test-guest kernel + initramfs booted under TCG. The only
// difference is the binaries: --kubevirt-root adds KubeVirt's launcher image files inside the
// pod's mount namespace (launcher-pod-harness.sh).
//
// Every wait polls at the same --poll interval for both kinds. --sync-delay holds the
// SyncVirtualMachine back after launcher-sock answers, as a handler that syncs later would. It prints progress lines as JSON
// and, last, one line `{"figures": {...}}`: ready_s (the monitor exec'd -> launcher-sock exists; pod_setup_s is the namespace set-up before it),
// sync_return_s, sync_to_running_s (SyncVirtualMachine sent -> GetDomain shows Running),
// notify_running_s (-> the notify server got the Running event), boot_s (Running -> the guest's
// boot marker on its serial log), rss_*_kib (VmRSS once the guest booted), kill_to_shutoff_s,
// kill_to_exit_s (KillVirtualMachine sent -> GetDomain Shutoff and the Shutoff event -> DeleteDomain -> the pod's
// monitor exited), sync_start_unix (for lining up the launcher's own log timestamps).
//
//	kvrs-kvlauncher floor --pod-script scripts/launcher-pod-harness.sh --monitor PATH --floor PATH
//	    --guest DIR --domain-xml FILE [--work DIR]
//
// runs libvirt alone in the same pod set-up (kvrs's monitor running
// bins/virt-launcher/examples/libvirt-floor.rs in place of the launcher): a fresh libvirtd, connect, QEMU capability probe, define + start of FILE. Its
// figures (kind "libvirt") are the floor under SyncVirtualMachine -> Running; see floor.go.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

var outMu sync.Mutex

// emit prints one JSON line on stdout.
func emit(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"marshal_error": %q}`, err.Error()))
	}
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kvrs-kvlauncher measure --kind kubevirt|kvrs --pod-script S --monitor M [--kubevirt-root D] --guest D --vmi F [--work D] [--poll 20ms] [--sync-delay 0s]")
	fmt.Fprintln(os.Stderr, "       kvrs-kvlauncher floor --pod-script S --monitor M --floor B --guest D --domain-xml F [--work D]")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "measure":
		err = measure(os.Args[2:])
	case "floor":
		err = floor(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvrs-kvlauncher %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
