package oracleharness

import (
	"encoding/json"

	"go.uber.org/mock/gomock"
	k8sv1 "k8s.io/api/core/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
	kubevirtfake "kubevirt.io/client-go/kubevirt/fake"

	"kubevirt.io/kubevirt/pkg/hooks"
	"kubevirt.io/kubevirt/pkg/network/netbinding"
	netannotations "kubevirt.io/kubevirt/pkg/network/pod/annotations"
	netresources "kubevirt.io/kubevirt/pkg/network/resources"
	storageannotations "kubevirt.io/kubevirt/pkg/storage/pod/annotations"
	"kubevirt.io/kubevirt/pkg/testutils"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-controller/services"
)

// The launcher template parameters of the pod oracles (tests/diff/harness.go).
const (
	LauncherImage    = "quay.io/kubevirt/virt-launcher:v1.9.0"
	qemuTimeout      = 240
	virtShareDir     = "/var/run/kubevirt"
	EphemeralDiskDir = "/var/run/kubevirt-ephemeral-disks"
	containerDiskDir = "/var/run/kubevirt/container-disks"
	hotplugDiskDir   = "/var/run/kubevirt/hotplug-disks"
	launcherSubGid   = 107
)

// ClusterConfig is the cluster configuration of a scenario's spec.configuration (absent or
// null: all defaults).
func ClusterConfig(raw json.RawMessage) (*virtconfig.ClusterConfig, error) {
	var kvConfig v1.KubeVirtConfiguration
	if err := DecodeOptional(raw, &kvConfig, "configuration"); err != nil {
		return nil, err
	}
	config, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(&kvConfig)
	return config, nil
}

// Clients are a scenario's fake API servers, each recording the controller's calls through the
// harness's reactor, and the mocked KubevirtClient over them. The client serves the VMIs and
// the core API; a harness adds what its controller reaches besides.
type Clients struct {
	Kube   *k8sfake.Clientset
	Virt   *kubevirtfake.Clientset
	Client *kubecli.MockKubevirtClient
}

// Clients returns the scenario's clients; kubevirtUpdate, when set, may serve an update to the
// kubevirt.io API server itself (see Reactor).
func (h *Harness) Clients(kubevirtUpdate UpdateHook) Clients {
	kube := k8sfake.NewSimpleClientset()
	virt := kubevirtfake.NewSimpleClientset()
	kube.PrependReactor("*", "*", h.Reactor("k8s", kube.Tracker(), nil))
	virt.PrependReactor("*", "*", h.Reactor("kubevirt", virt.Tracker(), kubevirtUpdate))
	client := kubecli.NewMockKubevirtClient(gomock.NewController(Failer{}))
	client.EXPECT().VirtualMachineInstance(gomock.Any()).DoAndReturn(
		func(ns string) kubecli.VirtualMachineInstanceInterface {
			return virt.KubevirtV1().VirtualMachineInstances(ns)
		}).AnyTimes()
	client.EXPECT().CoreV1().Return(kube.CoreV1()).AnyTimes()
	return Clients{Kube: kube, Virt: virt, Client: client}
}

// TemplateService is the launcher template service as virt-controller's initCommon wires it
// (pkg/virt-controller/watch/application.go), with the pod oracles' parameters, and the network
// annotations generator it uses, which the controllers take too.
func TemplateService(config *virtconfig.ClusterConfig, client kubecli.KubevirtClient, pvcs, quotas, namespaces cache.Store) (*services.TemplateService, netannotations.Generator) {
	netGen := netannotations.NewGenerator(config)
	templates := services.NewTemplateService(LauncherImage, qemuTimeout, virtShareDir, EphemeralDiskDir,
		containerDiskDir, hotplugDiskDir, "", pvcs, client, config, launcherSubGid, "",
		quotas, namespaces,
		services.WithSidecarCreator(func(vmi *v1.VirtualMachineInstance, _ *v1.KubeVirtConfiguration) (hooks.HookSidecarList, error) {
			return hooks.UnmarshalHookSidecarList(vmi)
		}),
		services.WithSidecarCreator(netbinding.NetBindingPluginSidecarList),
		services.WithNetMemoryCalculator(netresources.MemoryCalculator{}),
		services.WithAnnotationsGenerators(netGen, storageannotations.Generator{}),
		services.WithNetTargetAnnotationsGenerator(netGen),
	)
	return templates, netGen
}

// LauncherOnly keeps the pods virt-controller's pod cache holds: those labelled kubevirt.io
// (launcher and attachment pods).
func LauncherOnly(p *k8sv1.Pod) bool {
	_, ok := p.Labels[v1.AppLabel]
	return ok
}
