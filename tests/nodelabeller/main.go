// Command kvrs-nodelabeller-go runs KubeVirt v1.9.0's node labeller
// (pkg/virt-handler/node-labeller, imported as a Go module) on the cases read from stdin (a JSON
// array) and writes the labels it put on the node for each, as a JSON array on stdout
// (tests/nodelabeller_oracle.rs compares them with kvrs's, built by
// scripts/nodelabeller-harness.sh).
//
// KubeVirt's labeller reads its files from the fixed /var/lib/kubevirt-node-labeller/: the
// caller runs this command in a private mount namespace with a tmpfs there, and each case's
// files are written into it before the labeller is made. The labeller is driven through its
// exported API only: NewNodeLabeller with a fake clientset holding one node, then Run until the
// node's labels change (its first sync), as virt-handler runs it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"libvirt.org/go/libvirtxml"

	v1 "kubevirt.io/api/core/v1"

	nodelabeller "kubevirt.io/kubevirt/pkg/virt-handler/node-labeller"
	"kubevirt.io/kubevirt/pkg/testutils"
)

type labellerCase struct {
	Name string `json:"name"`
	// The files of /var/lib/kubevirt-node-labeller (virsh_domcapabilities.xml,
	// supported_features.xml, capabilities.xml), by name.
	Files map[string]string `json:"files"`
	// The KubeVirt CR's spec.configuration.obsoleteCPUModels; null: KubeVirt's defaults.
	ObsoleteCPUModels map[string]bool `json:"obsoleteCPUModels"`
}

type outcome struct {
	Name string `json:"name"`
	// The labels on the node after the labeller's first sync (the initial hostname label
	// included), or the error NewNodeLabeller returned.
	Labels map[string]string `json:"labels,omitempty"`
	Error  string            `json:"error,omitempty"`
}

const host = "node01"

func run(c labellerCase) (outcome, error) {
	dir := nodelabeller.NodeLabellerVolumePath
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(dir, e.Name()))
	}
	for name, text := range c.Files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return outcome{}, fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	// As virt-handler does (cmd/virt-handler): the host CPU's counter from capabilities.xml.
	var counter *libvirtxml.CapsHostCPUCounter
	if text, ok := c.Files["capabilities.xml"]; ok {
		var caps libvirtxml.Caps
		if err := caps.Unmarshal(text); err != nil {
			return outcome{Name: c.Name, Error: "capabilities.xml: " + err.Error()}, nil
		}
		if caps.Host.CPU != nil {
			counter = caps.Host.CPU.Counter
		}
	}
	node := &k8sv1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   host,
		Labels: map[string]string{"kubernetes.io/hostname": host},
	}}
	kube := k8sfake.NewSimpleClientset(node)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := store.Add(node); err != nil {
		return outcome{}, err
	}
	config, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(&v1.KubeVirtConfiguration{ObsoleteCPUModels: c.ObsoleteCPUModels})
	labeller, err := nodelabeller.NewNodeLabeller(config, kube.CoreV1().Nodes(), store, host, record.NewFakeRecorder(100), counter, nil)
	if err != nil {
		return outcome{Name: c.Name, Error: err.Error()}, nil
	}
	stop := make(chan struct{})
	go labeller.Run(stop)
	defer close(stop)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got, err := kube.CoreV1().Nodes().Get(context.Background(), host, metav1.GetOptions{})
		if err != nil {
			return outcome{}, err
		}
		if len(got.Labels) > 1 {
			return outcome{Name: c.Name, Labels: got.Labels}, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return outcome{}, fmt.Errorf("%s: the labeller did not patch the node within 20 s", c.Name)
}

func main() {
	var cases []labellerCase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintln(os.Stderr, "reading cases:", err)
		os.Exit(2)
	}
	outs := make([]outcome, 0, len(cases))
	for _, c := range cases {
		o, err := run(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		outs = append(outs, o)
	}
	if err := json.NewEncoder(os.Stdout).Encode(outs); err != nil {
		fmt.Fprintln(os.Stderr, "writing outcomes:", err)
		os.Exit(1)
	}
}
