// Command kvrs-vmistorage-go runs ONE Execute of KubeVirt v1.9.0's VMI controller
// (pkg/virt-controller/watch/vmi, built with its own NewController, the real launcher template
// service and the network and storage helpers virt-controller wires in production) per scenario
// read from stdin (a JSON array), against fake clientsets and informer caches filled from the
// scenario, and writes every API call it made, its events and its queue operations as a JSON
// array on stdout (one outcome per scenario, in order).
//
// The run, the time shift that makes every timestamp the controller writes read as the
// scenario's "now", and the recording are ../oracleharness's; this command brings the scenario
// and the controller.
package main

import (
	"encoding/json"

	"kvrs.dev/tests/oracleharness"
)

// scenario is one reconcile: the key's VMI and what the caches and API servers hold.
type scenario struct {
	oracleharness.Header
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

func main() {
	opts := oracleharness.Options{Program: "kvrs-vmistorage-go"}
	oracleharness.Main(opts, func(s scenario, shift oracleharness.Shift) (*oracleharness.Harness, error) {
		s.VMI = shift.Raw(s.VMI)
		shift.All(s.VMs, s.Pods, s.PVCs, s.DataVolumes, s.StorageClasses, s.Migrations)
		return newHarness(s)
	})
}
