// Package oracleharness is the skeleton of kvrs's controller oracle harnesses (tests/migration,
// tests/vmistorage): each runs ONE Execute of a KubeVirt v1.9.0 controller per scenario read
// from stdin (a JSON array), against fake clientsets and informer caches filled from the
// scenario, and writes every API call it made, its events and its queue operations as a JSON
// array on stdout (one Outcome per scenario, in order). A harness brings its scenario type and
// how to build its controller; this package brings the rest.
//
// KubeVirt's controllers read the wall clock (metav1.Now, time.Now) and have no clock to inject,
// so Main moves the scenarios in time instead: every RFC 3339 timestamp of the input is shifted
// by (T - now), T being a whole second shortly ahead; the Executes all run within the second
// after T, and the output's timestamps are shifted back. Durations (pending timeouts) come out
// exact, and every timestamp a controller writes reads as the scenario's "now".
package oracleharness

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"time"
)

// Header is what every scenario carries; a harness's scenario type embeds it.
type Header struct {
	Name string `json:"name"`
	// RFC 3339 virtual clock (default 2026-01-01T00:00:00Z).
	Now string `json:"now"`
}

// Head returns the header (promoted to the scenario types that embed Header).
func (h Header) Head() Header { return h }

// Scenario is a harness's scenario type: anything that embeds Header.
type Scenario interface{ Head() Header }

// Options are what differs between the harnesses' runs.
type Options struct {
	// Program names the harness in its messages (kvrs-migration-go).
	Program string
	// GoTimes shifts Go's time.Time.String() of a UTC instant too (an annotation the migration
	// controller writes in that form), besides RFC 3339 timestamps.
	GoTimes bool
}

const defaultNow = "2026-01-01T00:00:00Z"

var (
	program = "oracleharness"
	rfc3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
	goTime  = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0000 UTC$`)
)

const goTimeLayout = "2006-01-02 15:04:05 -0700 MST"

// Die ends the harness with a message on stderr, prefixed with its program name.
func Die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, program+": "+format+"\n", args...)
	os.Exit(1)
}

// Shift moves one scenario's timestamps by a fixed duration.
type Shift struct {
	d       time.Duration
	goTimes bool
}

// value moves every timestamp string inside a decoded JSON document.
func (s Shift) value(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = s.value(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = s.value(e)
		}
		return x
	case string:
		if rfc3339.MatchString(x) {
			if t, err := time.Parse(time.RFC3339, x); err == nil {
				return t.Add(s.d).UTC().Format(time.RFC3339)
			}
		}
		if s.goTimes && goTime.MatchString(x) {
			if t, err := time.Parse(goTimeLayout, x); err == nil {
				return t.Add(s.d).UTC().String()
			}
		}
		return x
	default:
		return v
	}
}

// Raw shifts a raw document (null and absent stay as they are).
func (s Shift) Raw(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return raw
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	out, err := json.Marshal(s.value(v))
	if err != nil {
		return raw
	}
	return out
}

// All shifts every document of every list in place.
func (s Shift) All(lists ...[]json.RawMessage) {
	for _, raws := range lists {
		for i := range raws {
			raws[i] = s.Raw(raws[i])
		}
	}
}

// Main reads the scenarios from stdin, prepares each (prepare gets the scenario and the shift
// to apply to its documents, and returns its controller's Harness), executes them all within
// one wall-clock second and writes the outcomes to stdout.
func Main[S Scenario](opts Options, prepare func(s S, shift Shift) (*Harness, error)) {
	program = opts.Program
	var scenarios []S
	if err := json.NewDecoder(os.Stdin).Decode(&scenarios); err != nil {
		Die("reading scenarios: %v", err)
	}
	// A few tries: a batch must run within one wall-clock second.
	for attempt := 0; attempt < 5; attempt++ {
		outs, ok := runBatch(opts, scenarios, prepare)
		if !ok {
			continue
		}
		if err := json.NewEncoder(os.Stdout).Encode(outs); err != nil {
			Die("writing outcomes: %v", err)
		}
		return
	}
	Die("could not run the scenarios within one wall-clock second (machine too busy?)")
}

// runBatch prepares every scenario for T (the next whole second at least 2 s ahead), waits for
// T and executes them; ok is false when the executes did not all finish within that second.
func runBatch[S Scenario](opts Options, scenarios []S, prepare func(S, Shift) (*Harness, error)) ([]Outcome, bool) {
	t := time.Now().Add(2 * time.Second).Truncate(time.Second)
	prepared := make([]*Harness, 0, len(scenarios))
	shifts := make([]Shift, 0, len(scenarios))
	for _, s := range scenarios {
		head := s.Head()
		now := head.Now
		if now == "" {
			now = defaultNow
		}
		virtual, err := time.Parse(time.RFC3339, now)
		if err != nil {
			Die("%s: now: %v", head.Name, err)
		}
		shift := Shift{d: t.Sub(virtual), goTimes: opts.GoTimes}
		h, err := prepare(s, shift)
		if err != nil {
			Die("%s: %v", head.Name, err)
		}
		prepared = append(prepared, h)
		shifts = append(shifts, shift)
	}
	if time.Now().After(t) {
		return nil, false
	}
	time.Sleep(time.Until(t) + 5*time.Millisecond)
	for _, h := range prepared {
		h.execute()
	}
	if time.Now().Sub(t) >= time.Second-50*time.Millisecond {
		fmt.Fprintln(os.Stderr, program+": the batch overran its second; again")
		return nil, false
	}
	outs := make([]Outcome, 0, len(prepared))
	for i, h := range prepared {
		o := h.outcome()
		var back Outcome
		raw, err := json.Marshal(o)
		if err != nil {
			Die("%s: %v", o.Name, err)
		}
		undo := Shift{d: -shifts[i].d, goTimes: shifts[i].goTimes}
		if err := json.Unmarshal(undo.Raw(raw), &back); err != nil {
			Die("%s: %v", o.Name, err)
		}
		outs = append(outs, back)
	}
	return outs, true
}
