// Command kvrs-mixed runs KubeVirt v1.9.0's own handler<->launcher code (imported from the
// kubevirt.io/kubevirt module) against kvrs, for tests/mixed_fleet.rs:
//
//	kvrs-mixed drive-launcher --socket S --vmi FILE.json --notify-socket N [--notify-owner UID:GID]
//	    KubeVirt's virt-handler side drives a launcher on S: its notify server (behind its own
//	    notify pipe, listening on N; a N named domain-notify.sock is served by the notify server
//	    itself) and its cmd client.
//	kvrs-mixed serve-launcher --socket S
//	    KubeVirt's launcher cmd server on S, backed by an in-memory domain manager.
//
// Both print one JSON object per line on stdout: {"call": ..., "ok": ..., "error": ...} per
// RPC, {"event": ...} per domain event the notify server received, {"manager": ...} per domain
// manager call the cmd server made.
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
	fmt.Fprintln(os.Stderr, "usage: kvrs-mixed drive-launcher --socket S --vmi FILE.json --notify-socket N [--notify-owner UID:GID]")
	fmt.Fprintln(os.Stderr, "       kvrs-mixed serve-launcher --socket S")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "drive-launcher":
		err = driveLauncher(os.Args[2:])
	case "serve-launcher":
		err = serveLauncher(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvrs-mixed %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
