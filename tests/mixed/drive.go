package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// driver records each call and whether a required one failed.
type driver struct {
	failed []string
}

// seenStatuses holds the Status.Status of every domain event the notify server received.
var seenStatuses = struct {
	sync.Mutex
	list []string
}{}

func sawStatus(want api.LifeCycle) bool {
	seenStatuses.Lock()
	defer seenStatuses.Unlock()
	for _, s := range seenStatuses.list {
		if s == string(want) {
			return true
		}
	}
	return false
}

// waitEvent waits for a domain event with the given status, as virt-handler acts on what its
// domain informer (fed by these events) shows; it prints one line.
func (d *driver) waitEvent(want api.LifeCycle, timeout time.Duration) bool {
	start := time.Now()
	for !sawStatus(want) {
		if time.Since(start) > timeout {
			err := fmt.Errorf("no %s domain event within %s", want, timeout)
			return d.call("notify:"+string(want), true, err, nil)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return d.call("notify:"+string(want), true, nil, map[string]any{"seconds": time.Since(start).Seconds()})
}

// call prints the outcome of one RPC; a failed required call fails the run.
func (d *driver) call(name string, required bool, err error, extra map[string]any) bool {
	line := map[string]any{"call": name, "ok": err == nil, "required": required}
	if err != nil {
		line["error"] = err.Error()
		if required {
			d.failed = append(d.failed, name)
		}
	}
	for k, v := range extra {
		line[k] = v
	}
	emit(line)
	return err == nil
}

func parseOwner(s string) (int, int, error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("--notify-owner %q: want UID:GID", s)
	}
	uid, err := strconv.Atoi(u)
	if err != nil {
		return 0, 0, fmt.Errorf("--notify-owner %q: %w", s, err)
	}
	gid, err := strconv.Atoi(g)
	if err != nil {
		return 0, 0, fmt.Errorf("--notify-owner %q: %w", s, err)
	}
	return uid, gid, nil
}

// startNotify runs KubeVirt's notify server in a private share dir (it always serves
// <dir>/domain-notify.sock) and KubeVirt's notify pipe from notifySocket to it, as virt-handler
// does for each launcher pod: the launcher dials notifySocket.
func startNotify(ctx context.Context, notifySocket, owner string, vmi *v1.VirtualMachineInstance) (func(), error) {
	// N named domain-notify.sock: the notify server itself serves it, no pipe.
	direct := filepath.Base(notifySocket) == "domain-notify.sock"
	shareDir := filepath.Dir(notifySocket)
	if !direct {
		dir, err := os.MkdirTemp("", "kvrs-mixed-handler-")
		if err != nil {
			return nil, err
		}
		shareDir = dir
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
			line := map[string]any{"event": string(ev.Type)}
			switch o := ev.Object.(type) {
			case *api.Domain:
				line["name"] = o.Name
				line["status"] = string(o.Status.Status)
				line["reason"] = string(o.Status.Reason)
				seenStatuses.Lock()
				seenStatuses.list = append(seenStatuses.list, string(o.Status.Status))
				seenStatuses.Unlock()
			case *metav1.Status:
				line["message"] = o.Message
			}
			emit(line)
		}
	}()
	go func() {
		for ev := range recorder.Events {
			emit(map[string]any{"k8s_event": ev})
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
		time.Sleep(20 * time.Millisecond)
	}

	// The socket the launcher dials belongs to its (non-root) user, as virt-handler arranges.
	chown := func(path string) error {
		if owner == "" {
			return nil
		}
		uid, gid, err := parseOwner(owner)
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	}
	if direct {
		if err := chown(handlerSock); err != nil {
			return nil, err
		}
		return func() { close(stop) }, nil
	}

	_ = os.Remove(notifySocket)
	listener, err := net.Listen("unix", notifySocket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", notifySocket, err)
	}
	if err := chown(notifySocket); err != nil {
		return nil, err
	}
	connect := pipe.NewConnectToNotifyFunc(shareDir)
	go pipe.Pipe(ctx, pipe.ChanFromListener(ctx, log.Log, listener), func(c net.Conn) {
		pipe.Proxy(log.Log, c, connect)
	})
	return func() {
		close(stop)
		_ = os.Remove(notifySocket)
		_ = os.RemoveAll(shareDir)
	}, nil
}

// waitFor polls GetDomain until the domain reaches want; it prints one line for the whole wait.
// A non-nil resend runs every resendEvery meanwhile, as virt-handler repeats a pending command
// on each sync of the VMI.
func (d *driver) waitFor(client cmdclient.LauncherClient, want api.LifeCycle, timeout time.Duration, resend func()) bool {
	const resendEvery = 5 * time.Second
	start := time.Now()
	lastSend := start
	polls := 0
	var last string
	var lastErr error
	for time.Since(start) < timeout {
		polls++
		domain, exists, err := client.GetDomain()
		lastErr = err
		if err == nil && exists {
			last = string(domain.Status.Status)
			if domain.Status.Status == want {
				return d.call("GetDomain", true, nil, map[string]any{
					"until": string(want), "status": last, "reason": string(domain.Status.Reason),
					"name": domain.Spec.Name, "polls": polls, "seconds": time.Since(start).Seconds(),
				})
			}
		} else if err == nil {
			last = "<no domain>"
		}
		if resend != nil && time.Since(lastSend) >= resendEvery {
			resend()
			lastSend = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := fmt.Errorf("domain not %s after %s (last status %q, last error %v)", want, timeout, last, lastErr)
	return d.call("GetDomain", true, err, map[string]any{"until": string(want), "polls": polls})
}

func driveLauncher(args []string) error {
	fs := flag.NewFlagSet("drive-launcher", flag.ExitOnError)
	socket := fs.String("socket", "", "the launcher's cmd socket (launcher-sock)")
	vmiFile := fs.String("vmi", "", "the VMI to sync, kubevirt.io/v1 JSON")
	notifySocket := fs.String("notify-socket", "", "where the launcher dials the handler's notify pipe (domain-notify-pipe.sock)")
	notifyOwner := fs.String("notify-owner", "", "UID:GID to own the notify socket (a non-root launcher)")
	runTimeout := fs.Duration("running-timeout", 60*time.Second, "how long to wait for Running")
	offTimeout := fs.Duration("shutoff-timeout", 90*time.Second, "how long to wait for Shutoff after Shutdown")
	fs.Parse(args)
	if *socket == "" || *vmiFile == "" || *notifySocket == "" {
		return errors.New("--socket, --vmi and --notify-socket are required")
	}
	raw, err := os.ReadFile(*vmiFile)
	if err != nil {
		return err
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(raw, vmi); err != nil {
		return fmt.Errorf("%s: %w", *vmiFile, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopNotify, err := startNotify(ctx, *notifySocket, *notifyOwner, vmi)
	if err != nil {
		return fmt.Errorf("notify server: %w", err)
	}
	defer stopNotify()
	emit(map[string]any{"notify": *notifySocket})

	d := &driver{}
	client, err := cmdclient.NewClient(*socket)
	if !d.call("NewClient", true, err, nil) {
		return fmt.Errorf("required calls failed: %v", d.failed)
	}
	defer client.Close()

	d.call("Ping", true, client.Ping(), nil)
	if d.call("SyncVirtualMachine", true, client.SyncVirtualMachine(vmi, &cmdv1.VirtualMachineOptions{}), nil) {
		if d.waitFor(client, api.Running, *runTimeout, nil) {
			d.waitEvent(api.Running, 30*time.Second)
		}
	}
	// What else virt-handler asks a running launcher; reported, not required.
	version, err := client.GetQemuVersion()
	d.call("GetQemuVersion", false, err, map[string]any{"version": version})
	domStats, exists, err := client.GetDomainStats()
	extra := map[string]any{"exists": exists}
	if domStats != nil {
		extra["name"] = domStats.Name
	}
	d.call("GetDomainStats", false, err, extra)
	// KubeVirt's client decodes the launcher's agent info into its own type; the agent may not
	// have connected yet, so the content is reported, the call required.
	guestInfo, err := client.GetGuestInfo()
	gaExtra := map[string]any{}
	if guestInfo != nil {
		gaExtra["guestAgentVersion"] = guestInfo.GAVersion
		gaExtra["timezone"] = guestInfo.Timezone
	}
	d.call("GetGuestInfo", true, err, gaExtra)
	d.call("SyncVirtualMachine(repeat)", true, client.SyncVirtualMachine(vmi, &cmdv1.VirtualMachineOptions{}), nil)

	if d.call("ShutdownVirtualMachine", true, client.ShutdownVirtualMachine(vmi), nil) {
		// ACPI needs a guest that listens for the power button: repeat until it powers off.
		d.waitFor(client, api.Shutoff, *offTimeout, func() {
			d.call("ShutdownVirtualMachine(repeat)", false, client.ShutdownVirtualMachine(vmi), nil)
		})
	}
	// virt-handler deletes the domain once its informer shows it stopped.
	d.waitEvent(api.Shutoff, 30*time.Second)
	d.call("DeleteDomain", true, client.DeleteDomain(vmi), nil)
	// Late domain events still in flight through the pipe.
	time.Sleep(500 * time.Millisecond)
	if len(d.failed) > 0 {
		return fmt.Errorf("required calls failed: %v", d.failed)
	}
	return nil
}
