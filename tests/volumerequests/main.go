// Command kvrs-volumerequests-go runs KubeVirt v1.9.0's VMsAdmitter.AdmitStatus (the
// virtualmachines/status part of its kubevirt-crd-status-validator: validateVolumeRequests,
// then the storage status checks) on the scenarios read from stdin (a JSON array) and writes
// its answers as a JSON array on stdout. Each scenario gets a fresh fake clientset holding only
// its VMI, which the admitter reads when the VM is Ready.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"go.uber.org/mock/gomock"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
	kubevirtfake "kubevirt.io/client-go/kubevirt/fake"

	"kubevirt.io/kubevirt/pkg/testutils"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
)

type scenario struct {
	Name string                     `json:"name"`
	VM   json.RawMessage            `json:"vm"`
	VMI  *v1.VirtualMachineInstance `json:"vmi"`
}

type cause struct {
	Type    string `json:"type"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

type outcome struct {
	Name    string  `json:"name"`
	Allowed bool    `json:"allowed"`
	Code    int32   `json:"code"`
	Message string  `json:"message"`
	Causes  []cause `json:"causes"`
}

// reporter ends the harness on a mock misuse (gomock wants a test reporter).
type reporter struct{}

func (reporter) Errorf(format string, args ...any) { fail(fmt.Sprintf(format, args...)) }
func (reporter) Fatalf(format string, args ...any) { fail(fmt.Sprintf(format, args...)) }

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "kvrs-volumerequests-go:", msg)
	os.Exit(1)
}

func run(s scenario) (outcome, error) {
	ctx := context.Background()
	virt := kubevirtfake.NewSimpleClientset()
	if s.VMI != nil {
		if _, err := virt.KubevirtV1().VirtualMachineInstances(s.VMI.Namespace).Create(ctx, s.VMI, metav1.CreateOptions{}); err != nil {
			return outcome{}, fmt.Errorf("%s: vmi: %w", s.Name, err)
		}
	}
	ctrl := gomock.NewController(reporter{})
	client := kubecli.NewMockKubevirtClient(ctrl)
	client.EXPECT().VirtualMachineInstance(gomock.Any()).DoAndReturn(func(ns string) kubecli.VirtualMachineInstanceInterface {
		return virt.KubevirtV1().VirtualMachineInstances(ns)
	}).AnyTimes()
	config, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(&v1.KubeVirtConfiguration{})
	admitter := &admitters.VMsAdmitter{VirtClient: client, ClusterConfig: config}
	review := &admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		Operation:   admissionv1.Update,
		Namespace:   "default",
		Resource:    metav1.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"},
		SubResource: "status",
		Object:      runtime.RawExtension{Raw: s.VM},
		OldObject:   runtime.RawExtension{Raw: s.VM},
	}}
	resp := admitter.AdmitStatus(ctx, review)
	out := outcome{Name: s.Name, Allowed: resp.Allowed, Causes: []cause{}}
	if resp.Result != nil {
		out.Code = resp.Result.Code
		out.Message = resp.Result.Message
		if resp.Result.Details != nil {
			for _, c := range resp.Result.Details.Causes {
				out.Causes = append(out.Causes, cause{Type: string(c.Type), Field: c.Field, Message: c.Message})
			}
		}
	}
	return out, nil
}

func main() {
	var scenarios []scenario
	if err := json.NewDecoder(os.Stdin).Decode(&scenarios); err != nil {
		fail(fmt.Sprintf("reading scenarios: %v", err))
	}
	outs := []outcome{}
	for _, s := range scenarios {
		out, err := run(s)
		if err != nil {
			fail(err.Error())
		}
		outs = append(outs, out)
	}
	if err := json.NewEncoder(os.Stdout).Encode(outs); err != nil {
		fail(err.Error())
	}
}
