package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/mock/gomock"
	admissionv1 "k8s.io/api/admission/v1"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadfake "kubevirt.io/client-go/networkattachmentdefinitionclient/fake"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"kubevirt.io/kubevirt/pkg/hooks"
	"kubevirt.io/kubevirt/pkg/hypervisor"
	netadmitter "kubevirt.io/kubevirt/pkg/network/admitter"
	"kubevirt.io/kubevirt/pkg/network/netbinding"
	netannotations "kubevirt.io/kubevirt/pkg/network/pod/annotations"
	netresources "kubevirt.io/kubevirt/pkg/network/resources"
	storageannotations "kubevirt.io/kubevirt/pkg/storage/pod/annotations"
	"kubevirt.io/kubevirt/pkg/testutils"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/mutating-webhook/mutators"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-controller/services"
)

// The oracle's pod rendering parameters (../shared/oracle/README.txt, "Pod rendering").
const (
	launcherImage    = "quay.io/kubevirt/virt-launcher:v1.9.0"
	qemuTimeout      = 240
	virtShareDir     = "/var/run/kubevirt"
	ephemeralDiskDir = "/var/run/kubevirt-ephemeral-disks"
	containerDiskDir = "/var/run/kubevirt/container-disks"
	hotplugDiskDir   = "/var/run/kubevirt/hotplug-disks"
	launcherSubGid   = 107
	// KubeVirt's random --qemu-timeout (240 s + 0..119 s), as the oracle writes it.
	jitterLiteral = "QEMU_TIMEOUT_WITH_JITTER"
)

// webhookClock is the instant the harness shows the webhook's phase transition timestamps at
// (tests/differential.rs admits kvrs's side at the same instant).
var webhookClock = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness holds one cluster configuration per feature-gate set (building one starts informers).
type harness struct {
	mu      sync.Mutex
	configs map[string]*virtconfig.ClusterConfig
}

func newHarness() *harness {
	return &harness{configs: map[string]*virtconfig.ClusterConfig{}}
}

// clusterConfig is the oracle's cluster: a KubeVirt CR with an empty spec.configuration (every
// default applies), default architecture amd64, plus the given feature gates and network binding
// plugins (network.binding).
func (h *harness) clusterConfig(gates []string, bindings map[string]v1.InterfaceBindingPlugin) *virtconfig.ClusterConfig {
	sorted := append([]string(nil), gates...)
	sort.Strings(sorted)
	key := strings.Join(sorted, ",")
	if len(bindings) > 0 {
		// encoding/json writes map keys sorted: one key per distinct set of plugins.
		b, _ := json.Marshal(bindings)
		key += "|" + string(b)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if cfg, ok := h.configs[key]; ok {
		return cfg
	}
	kv := &v1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"},
		Status:     v1.KubeVirtStatus{DefaultArchitecture: "amd64"},
	}
	if len(gates) > 0 {
		kv.Spec.Configuration.DeveloperConfiguration = &v1.DeveloperConfiguration{FeatureGates: gates}
	}
	if len(bindings) > 0 {
		kv.Spec.Configuration.NetworkConfiguration = &v1.NetworkConfiguration{Binding: bindings}
	}
	cfg, _, _ := testutils.NewFakeClusterConfigUsingKVWithCPUArch(kv, "amd64")
	h.configs[key] = cfg
	return cfg
}

func (h *harness) answer(req Request) (ans Answer) {
	ans.ID = req.ID
	defer func() {
		// A panic in KubeVirt's code on a generated input is an answer too (kvrs must not panic).
		if r := recover(); r != nil {
			ans = Answer{ID: req.ID, Error: fmt.Sprintf("panic: %v", r)}
		}
	}()
	cfg := h.clusterConfig(req.FeatureGates, req.NetworkBindings)
	raw, err := withDefaultNamespace(req.VMI)
	if err != nil {
		ans.Error = err.Error()
		return ans
	}
	vmi, rej, err := admit(raw, cfg)
	if err != nil {
		ans.Error = err.Error()
		return ans
	}
	if rej != nil {
		ans.Rejected = rej
		return ans
	}
	shown := vmi.DeepCopy()
	// The webhook stamps them with the current time: shown at a fixed instant, so the entries
	// themselves (which phases, in which order) are compared.
	for i := range shown.Status.PhaseTransitionTimestamps {
		shown.Status.PhaseTransitionTimestamps[i].PhaseTransitionTimestamp = metav1.NewTime(webhookClock)
	}
	if ans.Defaulted, err = json.MarshalIndent(shown, "", "  "); err != nil {
		ans.Error = err.Error()
		return ans
	}

	pod, podErr := renderPod(vmi.DeepCopy(), cfg)
	if podErr != nil {
		ans.PodError = podErr.Error()
	} else {
		body, err := json.MarshalIndent(pod, "", "  ")
		if err != nil {
			ans.PodError = err.Error()
		} else {
			ans.Pod = body
		}
	}
	if ans.Overhead, err = overhead(vmi.DeepCopy(), cfg, pod, podErr); err != nil {
		ans.OverheadError = err.Error()
	}
	if ans.DomainXML, err = domainXML(vmi.DeepCopy(), pod, cfg); err != nil {
		ans.DomainError = err.Error()
	}
	return ans
}

// withDefaultNamespace: the API server puts a namespace-less object into `default`.
func withDefaultNamespace(raw json.RawMessage) ([]byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("vmi: %w", err)
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	if ns, _ := meta["namespace"].(string); ns == "" {
		meta["namespace"] = "default"
	}
	return json.Marshal(obj)
}

func review(raw []byte) *admissionv1.AdmissionReview {
	return &admissionv1.AdmissionReview{
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("kvrs-diff"),
			Operation: admissionv1.Create,
			Resource:  metav1.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"},
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
}

// admit runs virt-api's mutating webhook for CREATE, then the validating webhook on its result,
// as the API server does. A refusal of either is a Rejection.
func admit(raw []byte, cfg *virtconfig.ClusterConfig) (*v1.VirtualMachineInstance, *Rejection, error) {
	presets, _ := testutils.NewFakeInformerFor(&v1.VirtualMachineInstancePreset{})
	mutator := &mutators.VMIsMutator{ClusterConfig: cfg, VMIPresetInformer: presets}
	resp := mutator.Mutate(review(raw))
	if !resp.Allowed {
		return nil, rejection("mutating", resp), nil
	}
	mutated, err := applyReplacePatch(raw, resp.Patch)
	if err != nil {
		return nil, nil, err
	}
	validator := &admitters.VMICreateAdmitter{
		ClusterConfig: cfg,
		// virt-api registers the network validator as the one extra spec validator.
		SpecValidators: []admitters.SpecValidator{
			func(field *k8sfield.Path, spec *v1.VirtualMachineInstanceSpec, c *virtconfig.ClusterConfig) []metav1.StatusCause {
				return netadmitter.Validate(field, spec, c)
			},
		},
	}
	vresp := validator.Admit(context.Background(), review(mutated))
	if !vresp.Allowed {
		return nil, rejection("validating", vresp), nil
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(mutated, vmi); err != nil {
		return nil, nil, fmt.Errorf("defaulted vmi: %w", err)
	}
	return vmi, nil, nil
}

func rejection(webhook string, resp *admissionv1.AdmissionResponse) *Rejection {
	r := &Rejection{Webhook: webhook, Causes: []Cause{}}
	if resp.Result != nil {
		r.Message = resp.Result.Message
		if resp.Result.Details != nil {
			for _, c := range resp.Result.Details.Causes {
				r.Causes = append(r.Causes, Cause{Field: c.Field, Type: string(c.Type), Message: c.Message})
			}
		}
	}
	return r
}

// applyReplacePatch applies the mutating webhook's patch, which replaces /spec, /metadata and
// /status (test operations, if any, are preconditions on the object we sent and hold).
func applyReplacePatch(raw, patch []byte) ([]byte, error) {
	if len(patch) == 0 {
		return raw, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("mutating webhook patch: %w", err)
	}
	for _, op := range ops {
		key := strings.TrimPrefix(op.Path, "/")
		switch {
		case op.Op == "test":
		case (op.Op == "replace" || op.Op == "add") && !strings.Contains(key, "/"):
			obj[key] = op.Value
		default:
			return nil, fmt.Errorf("mutating webhook patch: unexpected op %s %s", op.Op, op.Path)
		}
	}
	return json.Marshal(obj)
}

// pvcUID is the UID the harness gives claim `name` (persistent-reservation labels name it);
// tests/differential.rs tells kvrs the same.
func pvcUID(name string) string { return "uid-of-" + name }

// renderPod is virt-controller's RenderLaunchManifest with the oracle's parameters: every
// PVC/DataVolume (ephemeral ones too) the VMI names exists as a Bound filesystem RWO 10Gi PVC (and so does the
// backend-storage PVC), with UID pvcUID(name), every Multus network attachment definition exists (without a resource
// annotation), hook-sidecar ConfigMaps exist, no resource quota.
func renderPod(vmi *v1.VirtualMachineInstance, cfg *virtconfig.ClusterConfig) (*k8sv1.Pod, error) {
	pvcs := cache.NewStore(cache.MetaNamespaceKeyFunc)
	claim := func(name string) {
		q := resource.MustParse("10Gi")
		mode := k8sv1.PersistentVolumeFilesystem
		_ = pvcs.Add(&k8sv1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vmi.Namespace, UID: types.UID(pvcUID(name))},
			Spec: k8sv1.PersistentVolumeClaimSpec{
				AccessModes: []k8sv1.PersistentVolumeAccessMode{k8sv1.ReadWriteOnce},
				VolumeMode:  &mode,
				Resources:   k8sv1.VolumeResourceRequirements{Requests: k8sv1.ResourceList{k8sv1.ResourceStorage: q}},
			},
			Status: k8sv1.PersistentVolumeClaimStatus{
				Phase:       k8sv1.ClaimBound,
				AccessModes: []k8sv1.PersistentVolumeAccessMode{k8sv1.ReadWriteOnce},
				Capacity:    k8sv1.ResourceList{k8sv1.ResourceStorage: q},
			},
		})
	}
	for _, vol := range vmi.Spec.Volumes {
		switch {
		case vol.PersistentVolumeClaim != nil:
			claim(vol.PersistentVolumeClaim.ClaimName)
		case vol.DataVolume != nil:
			claim(vol.DataVolume.Name)
		case vol.Ephemeral != nil && vol.Ephemeral.PersistentVolumeClaim != nil:
			claim(vol.Ephemeral.PersistentVolumeClaim.ClaimName)
		}
	}
	claim("persistent-state-for-" + vmi.Name)

	var nads []runtime.Object
	for _, n := range vmi.Spec.Networks {
		if n.Multus == nil {
			continue
		}
		ns, name := vmi.Namespace, n.Multus.NetworkName
		if i := strings.Index(name, "/"); i >= 0 {
			ns, name = name[:i], name[i+1:]
		}
		nads = append(nads, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	}
	core := k8sfake.NewSimpleClientset()
	core.PrependReactor("get", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		get := a.(k8stesting.GetAction)
		return true, &k8sv1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: get.GetName(), Namespace: get.GetNamespace()}}, nil
	})
	ctrl := gomock.NewController(reporter{})
	client := kubecli.NewMockKubevirtClient(ctrl)
	client.EXPECT().NetworkClient().Return(nadfake.NewSimpleClientset(nads...)).AnyTimes()
	client.EXPECT().CoreV1().Return(core.CoreV1()).AnyTimes()

	netGen := netannotations.NewGenerator(cfg)
	svc := services.NewTemplateService(launcherImage, qemuTimeout, virtShareDir, ephemeralDiskDir,
		containerDiskDir, hotplugDiskDir, "", pvcs, client, cfg, launcherSubGid, "",
		cache.NewStore(cache.MetaNamespaceKeyFunc), cache.NewStore(cache.MetaNamespaceKeyFunc),
		services.WithSidecarCreator(func(vmi *v1.VirtualMachineInstance, _ *v1.KubeVirtConfiguration) (hooks.HookSidecarList, error) {
			return hooks.UnmarshalHookSidecarList(vmi)
		}),
		services.WithSidecarCreator(netbinding.NetBindingPluginSidecarList),
		services.WithNetMemoryCalculator(netresources.MemoryCalculator{}),
		services.WithAnnotationsGenerators(netGen, storageannotations.Generator{}),
		services.WithNetTargetAnnotationsGenerator(netGen),
	)
	pod, err := svc.RenderLaunchManifest(vmi)
	if err != nil {
		return nil, err
	}
	cmd := pod.Spec.Containers[0].Command
	for i := range cmd {
		if cmd[i] == "--qemu-timeout" && i+1 < len(cmd) {
			cmd[i+1] = jitterLiteral
		}
	}
	return pod, nil
}

// overhead: the lines of NAME.overhead.txt (KubeVirt's memory overhead, then the compute
// container's memory and cpu requests and limits).
func overhead(vmi *v1.VirtualMachineInstance, cfg *virtconfig.ClusterConfig, pod *k8sv1.Pod, podErr error) (string, error) {
	q := services.CalculateMemoryOverhead(cfg, netresources.MemoryCalculator{}, vmi,
		hypervisor.NewLauncherHypervisorResources(cfg.GetHypervisor().Name))
	var b bytes.Buffer
	fmt.Fprintf(&b, "memoryOverheadBytes: %d\n", q.Value())
	fmt.Fprintf(&b, "memoryOverhead: %s\n", q.String())
	if podErr != nil {
		return b.String(), fmt.Errorf("pod: %w", podErr)
	}
	res := pod.Spec.Containers[0].Resources
	for _, r := range []k8sv1.ResourceName{k8sv1.ResourceMemory, k8sv1.ResourceCPU} {
		for _, kind := range []struct {
			name string
			list k8sv1.ResourceList
		}{{"requests", res.Requests}, {"limits", res.Limits}} {
			if v, ok := kind.list[r]; ok {
				n := v.Value()
				if r == k8sv1.ResourceCPU {
					n = v.MilliValue()
				}
				fmt.Fprintf(&b, "compute.%s.%s: %s (%d)\n", kind.name, r, v.String(), n)
			}
		}
	}
	return b.String(), nil
}

// reporter turns gomock's complaints into panics (answer recovers them into an error).
type reporter struct{}

func (reporter) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (reporter) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// xmlIndent is how virt-launcher's hook manager writes the domain before defining it.
func xmlIndent(v any) (string, error) {
	b, err := xml.MarshalIndent(v, "", "\t")
	if err != nil {
		return "", err
	}
	return string(b) + "\n", nil
}
