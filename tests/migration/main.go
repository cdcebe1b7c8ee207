// Command kvrs-migration-go runs ONE Execute of KubeVirt v1.9.0's migration controller
// (pkg/virt-controller/watch/migration, built with its own NewController and the real launcher
// template service) per scenario read from stdin (a JSON array), against fake clientsets and
// informer caches filled from the scenario, and writes every API call it made, its events and
// its queue operations as a JSON array on stdout (one outcome per scenario, in order).
//
// The controller reads the wall clock (v1.Now, time.Now) and has no clock to inject, so the
// harness moves the scenarios in time instead: every RFC 3339 timestamp of the input is shifted
// by (T - now), T being a whole second shortly ahead; the Executes all run within the second
// after T, and the output's timestamps are shifted back. Durations (pending timeouts) come out
// exact, and every timestamp the controller writes reads as the scenario's "now".
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"time"
)

// scenario is one reconcile: the key's migration and what the caches and API servers hold.
type scenario struct {
	Name string `json:"name"`
	// RFC 3339 virtual clock (default 2026-01-01T00:00:00Z).
	Now       string          `json:"now"`
	Migration json.RawMessage `json:"migration"`
	// Other migrations in the cache (same or other VMIs).
	Migrations        []json.RawMessage `json:"migrations"`
	VMIs              []json.RawMessage `json:"vmis"`
	Pods              []json.RawMessage `json:"pods"`
	Nodes             []json.RawMessage `json:"nodes"`
	Namespaces        []json.RawMessage `json:"namespaces"`
	MigrationPolicies []json.RawMessage `json:"migrationPolicies"`
	// The KubeVirt CR in the kubevirt informer (its status.synchronizationAddresses).
	KubeVirt json.RawMessage `json:"kubevirt"`
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
	Priority     *int   `json:"priority,omitempty"`
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
	// Go's time.Time.String() of a UTC instant (the target-ready annotation).
	goTime = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0000 UTC$`)
)

const goTimeLayout = "2006-01-02 15:04:05 -0700 MST"

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
		if goTime.MatchString(x) {
			if t, err := time.Parse(goTimeLayout, x); err == nil {
				return t.Add(d).UTC().String()
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
	fmt.Fprintf(os.Stderr, "kvrs-migration-go: "+format+"\n", args...)
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
		s.Migration = shiftRaw(s.Migration, d)
		for _, l := range [][]json.RawMessage{s.Migrations, s.VMIs, s.Pods, s.Nodes, s.Namespaces, s.MigrationPolicies} {
			shiftAll(l, d)
		}
		s.KubeVirt = shiftRaw(s.KubeVirt, d)
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
		fmt.Fprintln(os.Stderr, "kvrs-migration-go: the batch overran its second; again")
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
