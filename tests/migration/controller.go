package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"sync"
	"time"

	"go.uber.org/mock/gomock"
	k8sv1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	v1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"
	"kubevirt.io/client-go/kubecli"
	kubevirtfake "kubevirt.io/client-go/kubevirt/fake"
	"kubevirt.io/client-go/log"
	nadfake "kubevirt.io/client-go/networkattachmentdefinitionclient/fake"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	virtcontroller "kubevirt.io/kubevirt/pkg/controller"
	"kubevirt.io/kubevirt/pkg/hooks"
	"kubevirt.io/kubevirt/pkg/network/netbinding"
	netannotations "kubevirt.io/kubevirt/pkg/network/pod/annotations"
	netresources "kubevirt.io/kubevirt/pkg/network/resources"
	storageannotations "kubevirt.io/kubevirt/pkg/storage/pod/annotations"
	"kubevirt.io/kubevirt/pkg/testutils"
	"kubevirt.io/kubevirt/pkg/virt-controller/services"
	"kubevirt.io/kubevirt/pkg/virt-controller/watch/migration"
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

// recQueue records what the controller asks of its queue; only the first GetWithPriority (the
// key under reconcile) reaches the real queue.
type recQueue struct {
	priorityqueue.PriorityQueue[string]
	mu  sync.Mutex
	ops []queueOp
}

func (q *recQueue) record(op queueOp) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops = append(q.ops, op)
}

func (q *recQueue) AddWithOpts(o priorityqueue.AddOpts, items ...string) {
	for _, k := range items {
		op := queueOp{Op: "Add", Key: k, Priority: o.Priority}
		switch {
		case o.RateLimited:
			op.Op = "AddRateLimited"
		case o.After > 0:
			secs := int64(o.After / time.Second)
			op.Op, op.DelaySeconds = "AddAfter", &secs
		}
		q.record(op)
	}
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
	c       *migration.Controller
	queue   *recQueue
	events  *recorder
	mu      sync.Mutex
	actions []action
}

// reactor records every call a fake clientset receives, in order across both clientsets, and
// names a generateName pod as the oracle's fake API server does (suffix 00000). An update of a
// migration's status subresource changes only the status, as on a real API server (the fake
// tracker would store the whole object, finalizers included, and KubeVirt would then skip the
// update that removes the finalizer).
func (h *harness) reactor(client string, tracker k8stesting.ObjectTracker) k8stesting.ReactionFunc {
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
			if sent, ok := x.GetObject().(*v1.VirtualMachineInstanceMigration); ok && x.GetSubresource() == "status" {
				h.record(act)
				stored, err := tracker.Get(x.GetResource(), x.GetNamespace(), sent.Name)
				if err != nil {
					return true, nil, err
				}
				updated := stored.(*v1.VirtualMachineInstanceMigration).DeepCopy()
				updated.Status = *sent.Status.DeepCopy()
				if err := tracker.Update(x.GetResource(), updated, x.GetNamespace()); err != nil {
					return true, nil, err
				}
				return true, updated, nil
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

func newHarness(s scenario) (*harness, error) {
	log.Log.SetIOWriter(io.Discard)
	h := &harness{name: s.Name, events: &recorder{}}

	mig, err := decode[v1.VirtualMachineInstanceMigration](s.Migration, "migration")
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
	kube.PrependReactor("*", "*", h.reactor("k8s", kube.Tracker()))
	virt.PrependReactor("*", "*", h.reactor("kubevirt", virt.Tracker()))
	ctrl := gomock.NewController(failer{})
	client := kubecli.NewMockKubevirtClient(ctrl)
	client.EXPECT().VirtualMachineInstanceMigration(gomock.Any()).DoAndReturn(
		func(ns string) kubecli.VirtualMachineInstanceMigrationInterface {
			return virt.KubevirtV1().VirtualMachineInstanceMigrations(ns)
		}).AnyTimes()
	client.EXPECT().VirtualMachineInstance(gomock.Any()).DoAndReturn(
		func(ns string) kubecli.VirtualMachineInstanceInterface {
			return virt.KubevirtV1().VirtualMachineInstances(ns)
		}).AnyTimes()
	client.EXPECT().CoreV1().Return(kube.CoreV1()).AnyTimes()
	client.EXPECT().PolicyV1().Return(kube.PolicyV1()).AnyTimes()
	client.EXPECT().NetworkClient().Return(nadfake.NewSimpleClientset()).AnyTimes()
	client.EXPECT().MigrationPolicy().Return(virt.MigrationsV1alpha1().MigrationPolicies()).AnyTimes()

	vmiInformer, _ := testutils.NewFakeInformerFor(&v1.VirtualMachineInstance{})
	migrationInformer, _ := testutils.NewFakeInformerWithIndexersFor(&v1.VirtualMachineInstanceMigration{}, virtcontroller.GetVirtualMachineInstanceMigrationInformerIndexers())
	podInformer, _ := testutils.NewFakeInformerFor(&k8sv1.Pod{})
	nodeInformer, _ := testutils.NewFakeInformerFor(&k8sv1.Node{})
	pvcInformer, _ := testutils.NewFakeInformerFor(&k8sv1.PersistentVolumeClaim{})
	storageClassInformer, _ := testutils.NewFakeInformerFor(&storagev1.StorageClass{})
	storageProfileInformer, _ := testutils.NewFakeInformerFor(&cdiv1.StorageProfile{})
	policyInformer, _ := testutils.NewFakeInformerFor(&migrationsv1.MigrationPolicy{})
	quotaInformer, _ := testutils.NewFakeInformerFor(&k8sv1.ResourceQuota{})
	kubevirtInformer, _ := testutils.NewFakeInformerFor(&v1.KubeVirt{})
	namespaceStore := cache.NewStore(cache.MetaNamespaceKeyFunc)

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
	c, err := migration.NewController(templates, vmiInformer, podInformer, migrationInformer, nodeInformer,
		pvcInformer, storageClassInformer, storageProfileInformer, policyInformer, quotaInformer,
		kubevirtInformer, h.events, client, config, netGen)
	if err != nil {
		return nil, err
	}
	h.c = c

	// The caches and the API servers hold the same objects (the fixtures do not go through the
	// reactors: they are not the controller's calls).
	addMigration := func(m *v1.VirtualMachineInstanceMigration) error {
		if err := migrationInformer.GetStore().Add(m); err != nil {
			return err
		}
		return virt.Tracker().Add(m)
	}
	if err := addMigration(mig); err != nil {
		return nil, err
	}
	for i, raw := range s.Migrations {
		m, err := decode[v1.VirtualMachineInstanceMigration](raw, fmt.Sprintf("migrations[%d]", i))
		if err != nil {
			return nil, err
		}
		if err := addMigration(m); err != nil {
			return nil, err
		}
	}
	for i, raw := range s.VMIs {
		v, err := decode[v1.VirtualMachineInstance](raw, fmt.Sprintf("vmis[%d]", i))
		if err != nil {
			return nil, err
		}
		if err := vmiInformer.GetStore().Add(v); err != nil {
			return nil, err
		}
		if err := virt.Tracker().Add(v); err != nil {
			return nil, err
		}
	}
	for i, raw := range s.Pods {
		p, err := decode[k8sv1.Pod](raw, fmt.Sprintf("pods[%d]", i))
		if err != nil {
			return nil, err
		}
		// Only launcher pods are in virt-controller's pod cache.
		if _, ok := p.Labels[v1.AppLabel]; ok {
			if err := podInformer.GetStore().Add(p); err != nil {
				return nil, err
			}
		}
		if err := kube.Tracker().Add(p); err != nil {
			return nil, err
		}
	}
	for i, raw := range s.Nodes {
		n, err := decode[k8sv1.Node](raw, fmt.Sprintf("nodes[%d]", i))
		if err != nil {
			return nil, err
		}
		if err := nodeInformer.GetStore().Add(n); err != nil {
			return nil, err
		}
		if err := kube.Tracker().Add(n); err != nil {
			return nil, err
		}
	}
	namespaces := s.Namespaces
	if len(namespaces) == 0 {
		namespaces = []json.RawMessage{json.RawMessage(`{"metadata":{"name":"default"}}`)}
	}
	for i, raw := range namespaces {
		n, err := decode[k8sv1.Namespace](raw, fmt.Sprintf("namespaces[%d]", i))
		if err != nil {
			return nil, err
		}
		if err := namespaceStore.Add(n); err != nil {
			return nil, err
		}
		if err := kube.Tracker().Add(n); err != nil {
			return nil, err
		}
	}
	for i, raw := range s.MigrationPolicies {
		p, err := decode[migrationsv1.MigrationPolicy](raw, fmt.Sprintf("migrationPolicies[%d]", i))
		if err != nil {
			return nil, err
		}
		if err := policyInformer.GetStore().Add(p); err != nil {
			return nil, err
		}
		if err := virt.Tracker().Add(p); err != nil {
			return nil, err
		}
	}
	if len(s.KubeVirt) > 0 && string(s.KubeVirt) != "null" {
		kv, err := decode[v1.KubeVirt](s.KubeVirt, "kubevirt")
		if err != nil {
			return nil, err
		}
		if err := kubevirtInformer.GetStore().Add(kv); err != nil {
			return nil, err
		}
	}

	h.key, err = virtcontroller.KeyFunc(mig)
	if err != nil {
		return nil, err
	}
	c.Queue.Add(h.key)
	h.queue = &recQueue{PriorityQueue: c.Queue}
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
		fmt.Fprintf(os.Stderr, "kvrs-migration-go: %s: Execute did not return\n", h.name)
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
