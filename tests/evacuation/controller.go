package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"go.uber.org/mock/gomock"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
	kubevirtfake "kubevirt.io/client-go/kubevirt/fake"

	virtcontroller "kubevirt.io/kubevirt/pkg/controller"
	"kubevirt.io/kubevirt/pkg/testutils"
	"kubevirt.io/kubevirt/pkg/virt-controller/watch/drain/evacuation"
)

// One sync of one node by KubeVirt's evacuation controller.
type nodeScenario struct {
	Name       string                                `json:"name"`
	Node       *k8sv1.Node                           `json:"node"`
	VMIs       []*v1.VirtualMachineInstance          `json:"vmis"`
	Migrations []*v1.VirtualMachineInstanceMigration `json:"migrations"`
	Pods       []*k8sv1.Pod                          `json:"pods"`
	Config     *v1.KubeVirtConfiguration             `json:"config"`
}

type created struct {
	VMIName      string            `json:"vmiName"`
	Namespace    string            `json:"namespace"`
	Annotations  map[string]string `json:"annotations"`
	Priority     string            `json:"priority"`
	GenerateName string            `json:"generateName"`
}

type nodeOutcome struct {
	Name       string    `json:"name"`
	Migrations []created `json:"migrations"`
	Events     []string  `json:"events"`
}

// failer stands in for gomock's test reporter: an unexpected call ends the harness.
type failer struct{}

func (failer) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
func (failer) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func runNode(s nodeScenario) (nodeOutcome, error) {
	ctrl := gomock.NewController(failer{})
	virtClient := kubecli.NewMockKubevirtClient(ctrl)
	fakeVirt := kubevirtfake.NewSimpleClientset()
	virtClient.EXPECT().VirtualMachineInstanceMigration(gomock.Any()).DoAndReturn(
		func(ns string) kubecli.VirtualMachineInstanceMigrationInterface {
			return fakeVirt.KubevirtV1().VirtualMachineInstanceMigrations(ns)
		}).AnyTimes()
	vmiInformer, _ := testutils.NewFakeInformerWithIndexersFor(&v1.VirtualMachineInstance{}, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		"node": func(obj interface{}) ([]string, error) {
			return []string{obj.(*v1.VirtualMachineInstance).Status.NodeName}, nil
		},
	})
	migrationInformer, _ := testutils.NewFakeInformerWithIndexersFor(&v1.VirtualMachineInstanceMigration{}, virtcontroller.GetVirtualMachineInstanceMigrationInformerIndexers())
	nodeInformer, _ := testutils.NewFakeInformerFor(&k8sv1.Node{})
	podInformer, _ := testutils.NewFakeInformerFor(&k8sv1.Pod{})
	recorder := record.NewFakeRecorder(100)
	recorder.IncludeObject = true
	conf := s.Config
	if conf == nil {
		conf = &v1.KubeVirtConfiguration{}
	}
	config, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(conf)
	c, err := evacuation.NewEvacuationController(vmiInformer, migrationInformer, nodeInformer, podInformer, recorder, virtClient, config)
	if err != nil {
		return nodeOutcome{}, err
	}
	for _, v := range s.VMIs {
		_ = vmiInformer.GetStore().Add(v)
	}
	for _, m := range s.Migrations {
		_ = migrationInformer.GetStore().Add(m)
	}
	for _, p := range s.Pods {
		_ = podInformer.GetStore().Add(p)
	}
	_ = nodeInformer.GetStore().Add(s.Node)
	c.Queue.Add(s.Node.Name)
	c.Execute()
	out := nodeOutcome{Name: s.Name, Migrations: []created{}, Events: []string{}}
	list, err := fakeVirt.KubevirtV1().VirtualMachineInstanceMigrations(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nodeOutcome{}, err
	}
	for _, m := range list.Items {
		p := ""
		if m.Spec.Priority != nil {
			p = string(*m.Spec.Priority)
		}
		out.Migrations = append(out.Migrations, created{VMIName: m.Spec.VMIName, Namespace: m.Namespace,
			Annotations: m.Annotations, Priority: p, GenerateName: m.GenerateName})
	}
	for len(recorder.Events) > 0 {
		e := <-recorder.Events
		out.Events = append(out.Events, strings.TrimSpace(e))
	}
	return out, nil
}

func runEvacuation() {
	var scenarios []nodeScenario
	if err := json.NewDecoder(os.Stdin).Decode(&scenarios); err != nil {
		fmt.Fprintln(os.Stderr, "reading scenarios:", err)
		os.Exit(2)
	}
	outs := make([]nodeOutcome, 0, len(scenarios))
	for _, s := range scenarios {
		o, err := runNode(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, s.Name, err)
			os.Exit(1)
		}
		outs = append(outs, o)
	}
	if err := json.NewEncoder(os.Stdout).Encode(outs); err != nil {
		fmt.Fprintln(os.Stderr, "writing outcomes:", err)
		os.Exit(1)
	}
}
