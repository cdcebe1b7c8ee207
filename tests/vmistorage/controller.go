package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"time"

	"go.uber.org/mock/gomock"
	k8sv1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
	kubevirtfake "kubevirt.io/client-go/kubevirt/fake"
	"kubevirt.io/client-go/log"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"kubevirt.io/kubevirt/pkg/container-disk"
	virtcontroller "kubevirt.io/kubevirt/pkg/controller"
	"kubevirt.io/kubevirt/pkg/hooks"
	netadmitter "kubevirt.io/kubevirt/pkg/network/admitter"
	netcontrollers "kubevirt.io/kubevirt/pkg/network/controllers"
	netmigration "kubevirt.io/kubevirt/pkg/network/migration"
	"kubevirt.io/kubevirt/pkg/network/netbinding"
	netannotations "kubevirt.io/kubevirt/pkg/network/pod/annotations"
	netresources "kubevirt.io/kubevirt/pkg/network/resources"
	storageannotations "kubevirt.io/kubevirt/pkg/storage/pod/annotations"
	"kubevirt.io/kubevirt/pkg/testutils"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-controller/services"
	"kubevirt.io/kubevirt/pkg/virt-controller/watch/topology"
	"kubevirt.io/kubevirt/pkg/virt-controller/watch/vmi"
)

// The launcher template parameters of the pod oracles (tests/diff/harness.go).
const (
	launcherImage    = "quay.io/kubevirt/virt-launcher:v1.9.0"
	qemuTimeout      = 240
	virtShareDir     = "/var/run/kubevirt"
	ephemeralDiskDir = "/var/run/kubevirt-ephemeral-disks"
	containerDiskDir = "/var/run/kubevirt/container-disks"
	hotplugDiskDir   = "/var/run/kubevirt/hotplug-disks"
	launcherSubGid   = 107
)

// failer stands in for gomock's test reporter: a client call the mock does not expect ends the
// harness (the controller reached an API this harness does not wire).
type failer struct{}

func (failer) Errorf(format string, args ...any) { die(format, args...) }
func (failer) Fatalf(format string, args ...any) { die(format, args...) }

// recorder is the controller's event recorder: every event with the object it is about.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func objectName(o runtime.Object) string {
	kind := reflect.TypeOf(o).String()
	if t := reflect.TypeOf(o); t.Kind() == reflect.Pointer {
		kind = t.Elem().Name()
	}
	m, err := meta.Accessor(o)
	if err != nil {
		return kind
	}
	return fmt.Sprintf("%s %s/%s", kind, m.GetNamespace(), m.GetName())
}

func (r *recorder) Event(o runtime.Object, eventtype, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{Object: objectName(o), Type: eventtype, Reason: reason, Message: message})
}

func (r *recorder) Eventf(o runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(o, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *recorder) AnnotatedEventf(o runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Eventf(o, eventtype, reason, messageFmt, args...)
}

// recQueue records what the controller asks of its queue; the key under reconcile reaches the
// real queue before the Execute, nothing the controller adds does.
type recQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	mu  sync.Mutex
	ops []queueOp
}

func (q *recQueue) record(op queueOp) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops = append(q.ops, op)
}

func (q *recQueue) Add(k string) { q.record(queueOp{Op: "Add", Key: k}) }
func (q *recQueue) AddAfter(k string, d time.Duration) {
	secs := int64(d / time.Second)
	q.record(queueOp{Op: "AddAfter", Key: k, DelaySeconds: &secs})
}
func (q *recQueue) AddRateLimited(k string) { q.record(queueOp{Op: "AddRateLimited", Key: k}) }
func (q *recQueue) Forget(k string)         { q.record(queueOp{Op: "Forget", Key: k}) }

// harness is one scenario's controller, ready for its Execute.
type harness struct {
	name    string
	key     string
	c       *vmi.Controller
	queue   *recQueue
	events  *recorder
	mu      sync.Mutex
	actions []action
}

// reactor records every call a fake clientset receives, in order across both clientsets, and
// names a generateName pod as the oracle's fake API server does (suffix 00000).
func (h *harness) reactor(client string) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		act := action{Client: client, Verb: a.GetVerb(), Resource: a.GetResource().Resource,
			Subresource: a.GetSubresource(), Namespace: a.GetNamespace()}
		switch x := a.(type) {
		case k8stesting.CreateActionImpl:
			if p, ok := x.GetObject().(*k8sv1.Pod); ok && p.Name == "" && p.GenerateName != "" {
				p.Name = p.GenerateName + "00000"
			}
			act.Object, _ = json.Marshal(x.GetObject())
			if m, err := meta.Accessor(x.GetObject()); err == nil {
				act.Name = m.GetName()
			}
		case k8stesting.UpdateActionImpl:
			act.Object, _ = json.Marshal(x.GetObject())
			if m, err := meta.Accessor(x.GetObject()); err == nil {
				act.Name = m.GetName()
			}
		case k8stesting.PatchActionImpl:
			act.Name, act.PatchType, act.Patch = x.GetName(), string(x.GetPatchType()), x.GetPatch()
		case k8stesting.DeleteActionImpl:
			act.Name = x.GetName()
			if p := x.GetDeleteOptions().Preconditions; p != nil {
				act.Preconds, _ = json.Marshal(p)
			}
		case k8stesting.GetActionImpl:
			act.Name = x.GetName()
		}
		h.record(act)
		return false, nil, nil
	}
}

func (h *harness) record(a action) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.actions = append(h.actions, a)
}

func decode[T any](raw json.RawMessage, what string) (*T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &v, nil
}

// fill decodes each raw object as a T and adds it to store and, when tracker is set, to the
// fake API server (the fixtures do not go through the reactors: they are not the controller's
// calls). keep filters what the cache holds (the API server holds everything).
func fill[T any, PT interface {
	*T
	runtime.Object
}](raws []json.RawMessage, what string, store cache.Store, tracker k8stesting.ObjectTracker, keep func(PT) bool) error {
	for i, raw := range raws {
		o, err := decode[T](raw, fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return err
		}
		p := PT(o)
		if keep == nil || keep(p) {
			if err := store.Add(p); err != nil {
				return err
			}
		}
		if tracker != nil {
			if err := tracker.Add(p); err != nil {
				return err
			}
		}
	}
	return nil
}

func newHarness(s scenario) (*harness, error) {
	log.Log.SetIOWriter(io.Discard)
	h := &harness{name: s.Name, events: &recorder{}}

	theVMI, err := decode[v1.VirtualMachineInstance](s.VMI, "vmi")
	if err != nil {
		return nil, err
	}
	var kvConfig v1.KubeVirtConfiguration
	if len(s.Configuration) > 0 && string(s.Configuration) != "null" {
		if err := json.Unmarshal(s.Configuration, &kvConfig); err != nil {
			return nil, fmt.Errorf("configuration: %w", err)
		}
	}
	config, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(&kvConfig)

	kube := k8sfake.NewSimpleClientset()
	virt := kubevirtfake.NewSimpleClientset()
	kube.PrependReactor("*", "*", h.reactor("k8s"))
	virt.PrependReactor("*", "*", h.reactor("kubevirt"))
	ctrl := gomock.NewController(failer{})
	client := kubecli.NewMockKubevirtClient(ctrl)
	client.EXPECT().VirtualMachineInstance(gomock.Any()).DoAndReturn(
		func(ns string) kubecli.VirtualMachineInstanceInterface {
			return virt.KubevirtV1().VirtualMachineInstances(ns)
		}).AnyTimes()
	client.EXPECT().CoreV1().Return(kube.CoreV1()).AnyTimes()

	vmiInformer, _ := testutils.NewFakeInformerWithIndexersFor(&v1.VirtualMachineInstance{}, virtcontroller.GetVMIInformerIndexers())
	vmInformer, _ := testutils.NewFakeInformerWithIndexersFor(&v1.VirtualMachine{}, virtcontroller.GetVirtualMachineInformerIndexers())
	podInformer, _ := testutils.NewFakeInformerFor(&k8sv1.Pod{})
	pvcInformer, _ := testutils.NewFakeInformerFor(&k8sv1.PersistentVolumeClaim{})
	migrationInformer, _ := testutils.NewFakeInformerWithIndexersFor(&v1.VirtualMachineInstanceMigration{}, virtcontroller.GetVirtualMachineInstanceMigrationInformerIndexers())
	storageClassInformer, _ := testutils.NewFakeInformerFor(&storagev1.StorageClass{})
	dataVolumeInformer, _ := testutils.NewFakeInformerFor(&cdiv1.DataVolume{})
	storageProfileInformer, _ := testutils.NewFakeInformerFor(&cdiv1.StorageProfile{})
	cdiInformer, _ := testutils.NewFakeInformerFor(&cdiv1.CDI{})
	cdiConfigInformer, _ := testutils.NewFakeInformerFor(&cdiv1.CDIConfig{})
	kubeVirtInformer, _ := testutils.NewFakeInformerFor(&v1.KubeVirt{})
	nodeInformer, _ := testutils.NewFakeInformerFor(&k8sv1.Node{})
	quotaInformer, _ := testutils.NewFakeInformerFor(&k8sv1.ResourceQuota{})
	namespaceStore := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := namespaceStore.Add(&k8sv1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}); err != nil {
		return nil, err
	}

	// As virt-controller's initCommon wires them (pkg/virt-controller/watch/application.go).
	containerdisk.SetLocalDirectoryOnly(filepath.Join(ephemeralDiskDir, "container-disk-data"))
	netGen := netannotations.NewGenerator(config)
	templates := services.NewTemplateService(launcherImage, qemuTimeout, virtShareDir, ephemeralDiskDir,
		containerDiskDir, hotplugDiskDir, "", pvcInformer.GetStore(), client, config, launcherSubGid, "",
		quotaInformer.GetStore(), namespaceStore,
		services.WithSidecarCreator(func(vmi *v1.VirtualMachineInstance, _ *v1.KubeVirtConfiguration) (hooks.HookSidecarList, error) {
			return hooks.UnmarshalHookSidecarList(vmi)
		}),
		services.WithSidecarCreator(netbinding.NetBindingPluginSidecarList),
		services.WithNetMemoryCalculator(netresources.MemoryCalculator{}),
		services.WithAnnotationsGenerators(netGen, storageannotations.Generator{}),
		services.WithNetTargetAnnotationsGenerator(netGen),
	)
	hinter := topology.NewTopologyHinter(nodeInformer.GetStore(), vmiInformer.GetStore(), config)
	c, err := vmi.NewController(templates, vmiInformer, vmInformer, podInformer, pvcInformer,
		migrationInformer, storageClassInformer, h.events, client, dataVolumeInformer,
		storageProfileInformer, cdiInformer, cdiConfigInformer, kubeVirtInformer, config, hinter,
		netGen, storageannotations.NewGenerator(config), netcontrollers.UpdateVMIStatus,
		func(field *k8sfield.Path, spec *v1.VirtualMachineInstanceSpec, cfg *virtconfig.ClusterConfig) []metav1.StatusCause {
			return netadmitter.ValidateCreation(field, spec, cfg)
		},
		netmigration.NewEvaluator(), nil, nil)
	if err != nil {
		return nil, err
	}
	h.c = c

	if err := vmiInformer.GetStore().Add(theVMI); err != nil {
		return nil, err
	}
	if err := virt.Tracker().Add(theVMI); err != nil {
		return nil, err
	}
	if err := fill[v1.VirtualMachine](s.VMs, "vms", vmInformer.GetStore(), virt.Tracker(), nil); err != nil {
		return nil, err
	}
	// Only pods labelled kubevirt.io (launcher and attachment pods) are in virt-controller's pod
	// cache.
	launcherOnly := func(p *k8sv1.Pod) bool {
		_, ok := p.Labels[v1.AppLabel]
		return ok
	}
	if err := fill[k8sv1.Pod](s.Pods, "pods", podInformer.GetStore(), kube.Tracker(), launcherOnly); err != nil {
		return nil, err
	}
	if err := fill[k8sv1.PersistentVolumeClaim](s.PVCs, "pvcs", pvcInformer.GetStore(), kube.Tracker(), nil); err != nil {
		return nil, err
	}
	if err := fill[cdiv1.DataVolume](s.DataVolumes, "dataVolumes", dataVolumeInformer.GetStore(), nil, nil); err != nil {
		return nil, err
	}
	if err := fill[storagev1.StorageClass](s.StorageClasses, "storageClasses", storageClassInformer.GetStore(), kube.Tracker(), nil); err != nil {
		return nil, err
	}
	if err := fill[v1.VirtualMachineInstanceMigration](s.Migrations, "migrations", migrationInformer.GetStore(), virt.Tracker(), nil); err != nil {
		return nil, err
	}

	h.key, err = virtcontroller.KeyFunc(theVMI)
	if err != nil {
		return nil, err
	}
	c.Queue.Add(h.key)
	h.queue = &recQueue{TypedRateLimitingInterface: c.Queue}
	c.Queue = h.queue
	return h, nil
}

func (h *harness) execute() {
	done := make(chan struct{})
	go func() {
		h.c.Execute()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		fmt.Fprintf(os.Stderr, "kvrs-vmistorage-go: %s: Execute did not return\n", h.name)
		os.Exit(1)
	}
}

func (h *harness) outcome() outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := outcome{Name: h.name, Key: h.key, Actions: h.actions, Events: h.events.events, Queue: h.queue.ops}
	if o.Actions == nil {
		o.Actions = []action{}
	}
	if o.Events == nil {
		o.Events = []event{}
	}
	if o.Queue == nil {
		o.Queue = []queueOp{}
	}
	return o
}
