// Command kvrs-vmistorage-go runs ONE Execute of KubeVirt v1.9.0's VMI controller
// (pkg/virt-controller/watch/vmi, built with its own NewController, the real launcher template
// service and the network and storage helpers virt-controller wires in production) per scenario
// read from stdin (a JSON array), against fake clientsets and informer caches filled from the
// scenario, and writes every API call it made, its events and its queue operations as a JSON
// array on stdout (one outcome per scenario, in order).
//
// The controller reads the wall clock (metav1.Now) and has no clock to inject, so the harness
// moves the scenarios in time instead: every RFC 3339 timestamp of the input is shifted by
// (T - now), T being a whole second shortly ahead; the Executes all run within the second after
// T, and the output's timestamps are shifted back, so every timestamp the controller writes
// reads as the scenario's "now".
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"time"
)

// scenario is one reconcile: the key's VMI and what the caches and API servers hold.
type scenario struct {
	Name string `json:"name"`
	// RFC 3339 virtual clock (default 2026-01-01T00:00:00Z).
	Now string          `json:"now"`
	VMI json.RawMessage `json:"vmi"`
	// The VirtualMachines in the cache (the VMI's owner, when it has one).
	VMs            []json.RawMessage `json:"vms"`
	Pods           []json.RawMessage `json:"pods"`
	PVCs           []json.RawMessage `json:"pvcs"`
	DataVolumes    []json.RawMessage `json:"dataVolumes"`
	StorageClasses []json.RawMessage `json:"storageClasses"`
	Migrations     []json.RawMessage `json:"migrations"`
	// spec.configuration of the cluster (default: all defaults).
	Configuration json.RawMessage `json:"configuration"`
}

// action is one API call, as ../shared/oracle-vm/README.txt describes them.
type action struct {
	Client      string          `json:"client"`
	Verb        string          `json:"verb"`
	Resource    string          `json:"resource"`
	Subresource string          `json:"subresource,omitempty"`
	Namespace   string          `json:"namespace,omitempty"`
	Name        string          `json:"name,omitempty"`
	PatchType   string          `json:"patchType,omitempty"`
	Patch       json.RawMessage `json:"patch,omitempty"`
	Object      json.RawMessage `json:"object,omitempty"`
	Preconds    json.RawMessage `json:"preconditions,omitempty"`
}

type event struct {
	Object  string `json:"object"`
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type queueOp struct {
	Op           string `json:"op"`
	Key          string `json:"key"`
	DelaySeconds *int64 `json:"delaySeconds,omitempty"`
}

type outcome struct {
	Name    string    `json:"name"`
	Key     string    `json:"key"`
	Actions []action  `json:"actions"`
	Events  []event   `json:"events"`
	Queue   []queueOp `json:"queue"`
}

const defaultNow = "2026-01-01T00:00:00Z"

var (
	rfc3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
)

// shift moves every timestamp string inside a decoded JSON document by d.
func shift(v any, d time.Duration) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = shift(e, d)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = shift(e, d)
		}
		return x
	case string:
		if rfc3339.MatchString(x) {
			if t, err := time.Parse(time.RFC3339, x); err == nil {
				return t.Add(d).UTC().Format(time.RFC3339)
			}
		}
		return x
	default:
		return v
	}
}

// shiftRaw is shift for a raw document (null and absent stay as they are).
func shiftRaw(raw json.RawMessage, d time.Duration) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return raw
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	out, err := json.Marshal(shift(v, d))
	if err != nil {
		return raw
	}
	return out
}

func shiftAll(raws []json.RawMessage, d time.Duration) {
	for i := range raws {
		raws[i] = shiftRaw(raws[i], d)
	}
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kvrs-vmistorage-go: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	var scenarios []scenario
	if err := json.NewDecoder(os.Stdin).Decode(&scenarios); err != nil {
		die("reading scenarios: %v", err)
	}
	// A few tries: a batch must run within one wall-clock second.
	for attempt := 0; attempt < 5; attempt++ {
		outs, ok := runBatch(scenarios)
		if !ok {
			continue
		}
		if err := json.NewEncoder(os.Stdout).Encode(outs); err != nil {
			die("writing outcomes: %v", err)
		}
		return
	}
	die("could not run the scenarios within one wall-clock second (machine too busy?)")
}

// runBatch prepares every scenario for T (the next whole second at least 2 s ahead), waits for
// T and executes them; ok is false when the executes did not all finish within that second.
func runBatch(scenarios []scenario) ([]outcome, bool) {
	t := time.Now().Add(2 * time.Second).Truncate(time.Second)
	prepared := make([]*harness, 0, len(scenarios))
	deltas := make([]time.Duration, 0, len(scenarios))
	for _, s := range scenarios {
		now := s.Now
		if now == "" {
			now = defaultNow
		}
		virtual, err := time.Parse(time.RFC3339, now)
		if err != nil {
			die("%s: now: %v", s.Name, err)
		}
		d := t.Sub(virtual)
		s.VMI = shiftRaw(s.VMI, d)
		for _, l := range [][]json.RawMessage{s.VMs, s.Pods, s.PVCs, s.DataVolumes, s.StorageClasses, s.Migrations} {
			shiftAll(l, d)
		}
		h, err := newHarness(s)
		if err != nil {
			die("%s: %v", s.Name, err)
		}
		prepared = append(prepared, h)
		deltas = append(deltas, d)
	}
	if time.Now().After(t) {
		return nil, false
	}
	time.Sleep(time.Until(t) + 5*time.Millisecond)
	for _, h := range prepared {
		h.execute()
	}
	if time.Now().Sub(t) >= time.Second-50*time.Millisecond {
		fmt.Fprintln(os.Stderr, "kvrs-vmistorage-go: the batch overran its second; again")
		return nil, false
	}
	outs := make([]outcome, 0, len(prepared))
	for i, h := range prepared {
		o := h.outcome()
		var back outcome
		raw, err := json.Marshal(o)
		if err != nil {
			die("%s: %v", o.Name, err)
		}
		if err := json.Unmarshal(shiftRaw(raw, -deltas[i]), &back); err != nil {
			die("%s: %v", o.Name, err)
		}
		outs = append(outs, back)
	}
	return outs, true
}
