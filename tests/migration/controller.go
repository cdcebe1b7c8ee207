package main

import (
	"encoding/json"
	"time"

	"go.uber.org/mock/gomock"
	k8sv1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	v1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"
	"kubevirt.io/client-go/kubecli"
	nadfake "kubevirt.io/client-go/networkattachmentdefinitionclient/fake"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	virtcontroller "kubevirt.io/kubevirt/pkg/controller"
	"kubevirt.io/kubevirt/pkg/testutils"
	"kubevirt.io/kubevirt/pkg/virt-controller/watch/migration"

	"kvrs.dev/tests/oracleharness"
)

// recQueue is the controller's queue as the harness records it: QueueLog's methods win over the
// real queue's (one level deeper), AddWithOpts is the priority queue's own; only the first
// GetWithPriority (the key under reconcile) reaches the real queue.
type recQueue struct {
	realQueue
	*oracleharness.QueueLog
}

type realQueue struct {
	priorityqueue.PriorityQueue[string]
}

func (q *recQueue) AddWithOpts(o priorityqueue.AddOpts, items ...string) {
	for _, k := range items {
		op := oracleharness.QueueOp{Op: "Add", Key: k, Priority: o.Priority}
		switch {
		case o.RateLimited:
			op.Op = "AddRateLimited"
		case o.After > 0:
			secs := int64(o.After / time.Second)
			op.Op, op.DelaySeconds = "AddAfter", &secs
		}
		q.Record(op)
	}
}

// statusUpdate makes an update of a migration's status subresource change only the status, as
// on a real API server (the fake tracker would store the whole object, finalizers included, and
// KubeVirt would then skip the update that removes the finalizer).
func statusUpdate(tracker k8stesting.ObjectTracker, x k8stesting.UpdateActionImpl) (bool, runtime.Object, error) {
	sent, ok := x.GetObject().(*v1.VirtualMachineInstanceMigration)
	if !ok || x.GetSubresource() != "status" {
		return false, nil, nil
	}
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

func newHarness(s scenario) (*oracleharness.Harness, error) {
	h := oracleharness.New(s.Name)

	mig, err := oracleharness.Decode[v1.VirtualMachineInstanceMigration](s.Migration, "migration")
	if err != nil {
		return nil, err
	}
	config, err := oracleharness.ClusterConfig(s.Configuration)
	if err != nil {
		return nil, err
	}
	clients := h.Clients(statusUpdate)
	kube, virt, client := clients.Kube, clients.Virt, clients.Client
	client.EXPECT().VirtualMachineInstanceMigration(gomock.Any()).DoAndReturn(
		func(ns string) kubecli.VirtualMachineInstanceMigrationInterface {
			return virt.KubevirtV1().VirtualMachineInstanceMigrations(ns)
		}).AnyTimes()
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

	templates, netGen := oracleharness.TemplateService(config, client, pvcInformer.GetStore(),
		quotaInformer.GetStore(), namespaceStore)
	c, err := migration.NewController(templates, vmiInformer, podInformer, migrationInformer, nodeInformer,
		pvcInformer, storageClassInformer, storageProfileInformer, policyInformer, quotaInformer,
		kubevirtInformer, h.Events, client, config, netGen)
	if err != nil {
		return nil, err
	}
	h.Run = func() { c.Execute() }

	// The caches and the API servers hold the same objects (the fixtures do not go through the
	// reactors: they are not the controller's calls).
	if err := migrationInformer.GetStore().Add(mig); err != nil {
		return nil, err
	}
	if err := virt.Tracker().Add(mig); err != nil {
		return nil, err
	}
	if err := oracleharness.Fill[v1.VirtualMachineInstanceMigration](s.Migrations, "migrations", migrationInformer.GetStore(), virt.Tracker(), nil); err != nil {
		return nil, err
	}
	if err := oracleharness.Fill[v1.VirtualMachineInstance](s.VMIs, "vmis", vmiInformer.GetStore(), virt.Tracker(), nil); err != nil {
		return nil, err
	}
	// Only launcher pods are in virt-controller's pod cache.
	if err := oracleharness.Fill[k8sv1.Pod](s.Pods, "pods", podInformer.GetStore(), kube.Tracker(), oracleharness.LauncherOnly); err != nil {
		return nil, err
	}
	if err := oracleharness.Fill[k8sv1.Node](s.Nodes, "nodes", nodeInformer.GetStore(), kube.Tracker(), nil); err != nil {
		return nil, err
	}
	namespaces := s.Namespaces
	if len(namespaces) == 0 {
		namespaces = []json.RawMessage{json.RawMessage(`{"metadata":{"name":"default"}}`)}
	}
	if err := oracleharness.Fill[k8sv1.Namespace](namespaces, "namespaces", namespaceStore, kube.Tracker(), nil); err != nil {
		return nil, err
	}
	if err := oracleharness.Fill[migrationsv1.MigrationPolicy](s.MigrationPolicies, "migrationPolicies", policyInformer.GetStore(), virt.Tracker(), nil); err != nil {
		return nil, err
	}
	if len(s.KubeVirt) > 0 && string(s.KubeVirt) != "null" {
		kv, err := oracleharness.Decode[v1.KubeVirt](s.KubeVirt, "kubevirt")
		if err != nil {
			return nil, err
		}
		if err := kubevirtInformer.GetStore().Add(kv); err != nil {
			return nil, err
		}
	}

	h.Key, err = virtcontroller.KeyFunc(mig)
	if err != nil {
		return nil, err
	}
	c.Queue.Add(h.Key)
	c.Queue = &recQueue{realQueue{c.Queue}, h.Queue}
	return h, nil
}
