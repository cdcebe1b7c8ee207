// Command kvrs-evacuation-go runs KubeVirt v1.9.0's PodEvictionAdmitter on the scenarios read
// from stdin (a JSON array) and writes what it decided, and what it left in the cluster, as a
// JSON array on stdout. Each scenario gets fresh fake clientsets holding only its pod and VMI.
// With the argument `evacuation` it runs KubeVirt's evacuation controller instead
// (evacuation.go: one sync of a node), see controller.go.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	admissionv1 "k8s.io/api/admission/v1"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	v1 "kubevirt.io/api/core/v1"
	kubevirtfake "kubevirt.io/client-go/kubevirt/fake"

	"kubevirt.io/kubevirt/pkg/testutils"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
)

type scenario struct {
	Name            string                     `json:"name"`
	Pod             *k8sv1.Pod                 `json:"pod"`
	VMI             *v1.VirtualMachineInstance `json:"vmi"`
	ClusterStrategy *v1.EvictionStrategy       `json:"clusterStrategy"`
	Eviction        json.RawMessage            `json:"eviction"`
	DryRun          bool                       `json:"dryRun"`
}

type outcome struct {
	Name    string `json:"name"`
	Allowed bool   `json:"allowed"`
	Code    int32  `json:"code"`
	Message string `json:"message"`
	// The VMI after the admission (absent when there was none).
	VMI *v1.VirtualMachineInstance `json:"vmi,omitempty"`
}

func run(s scenario) (outcome, error) {
	kube := k8sfake.NewSimpleClientset()
	virt := kubevirtfake.NewSimpleClientset()
	ctx := context.Background()
	if s.Pod != nil {
		if _, err := kube.CoreV1().Pods(s.Pod.Namespace).Create(ctx, s.Pod, metav1.CreateOptions{}); err != nil {
			return outcome{}, fmt.Errorf("%s: pod: %w", s.Name, err)
		}
	}
	if s.VMI != nil {
		if _, err := virt.KubevirtV1().VirtualMachineInstances(s.VMI.Namespace).Create(ctx, s.VMI, metav1.CreateOptions{}); err != nil {
			return outcome{}, fmt.Errorf("%s: vmi: %w", s.Name, err)
		}
	}
	config, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(&v1.KubeVirtConfiguration{EvictionStrategy: s.ClusterStrategy})
	admitter := admitters.NewPodEvictionAdmitter(config, kube, virt)
	dryRun := s.DryRun
	podName := "virt-launcher-missing"
	if s.Pod != nil {
		podName = s.Pod.Name
	}
	review := &admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		Namespace: "default",
		Name:      podName,
		Object:    runtime.RawExtension{Raw: s.Eviction},
		DryRun:    &dryRun,
	}}
	resp := admitter.Admit(ctx, review)
	out := outcome{Name: s.Name, Allowed: resp.Allowed}
	if resp.Result != nil {
		out.Code = resp.Result.Code
		out.Message = resp.Result.Message
	}
	if s.VMI != nil {
		after, err := virt.KubevirtV1().VirtualMachineInstances(s.VMI.Namespace).Get(ctx, s.VMI.Name, metav1.GetOptions{})
		if err != nil {
			return outcome{}, fmt.Errorf("%s: vmi after: %w", s.Name, err)
		}
		out.VMI = after
	}
	return out, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "evacuation" {
		runEvacuation()
		return
	}
	var scenarios []scenario
	if err := json.NewDecoder(os.Stdin).Decode(&scenarios); err != nil {
		fmt.Fprintln(os.Stderr, "reading scenarios:", err)
		os.Exit(2)
	}
	outs := make([]outcome, 0, len(scenarios))
	for _, s := range scenarios {
		o, err := run(s)
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
