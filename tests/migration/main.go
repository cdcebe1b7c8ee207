// Command kvrs-migration-go runs ONE Execute of KubeVirt v1.9.0's migration controller
// (pkg/virt-controller/watch/migration, built with its own NewController and the real launcher
// template service) per scenario read from stdin (a JSON array), against fake clientsets and
// informer caches filled from the scenario, and writes every API call it made, its events and
// its queue operations as a JSON array on stdout (one outcome per scenario, in order).
//
// The run, the time shift that makes every timestamp the controller writes read as the
// scenario's "now", and the recording are ../oracleharness's; this command brings the scenario
// and the controller.
package main

import (
	"encoding/json"

	"kvrs.dev/tests/oracleharness"
)

// scenario is one reconcile: the key's migration and what the caches and API servers hold.
type scenario struct {
	oracleharness.Header
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

func main() {
	// The target-ready annotation is Go's time.Time.String() of a UTC instant.
	opts := oracleharness.Options{Program: "kvrs-migration-go", GoTimes: true}
	oracleharness.Main(opts, func(s scenario, shift oracleharness.Shift) (*oracleharness.Harness, error) {
		s.Migration = shift.Raw(s.Migration)
		shift.All(s.Migrations, s.VMIs, s.Pods, s.Nodes, s.Namespaces, s.MigrationPolicies)
		s.KubeVirt = shift.Raw(s.KubeVirt)
		return newHarness(s)
	})
}
