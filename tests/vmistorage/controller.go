package main

import (
	"path/filepath"

	k8sv1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	v1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"kubevirt.io/kubevirt/pkg/container-disk"
	virtcontroller "kubevirt.io/kubevirt/pkg/controller"
	netadmitter "kubevirt.io/kubevirt/pkg/network/admitter"
	netcontrollers "kubevirt.io/kubevirt/pkg/network/controllers"
	netmigration "kubevirt.io/kubevirt/pkg/network/migration"
	storageannotations "kubevirt.io/kubevirt/pkg/storage/pod/annotations"
	"kubevirt.io/kubevirt/pkg/testutils"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-controller/watch/topology"
	"kubevirt.io/kubevirt/pkg/virt-controller/watch/vmi"

	"kvrs.dev/tests/oracleharness"
)

// recQueue is the controller's queue as the harness records it: QueueLog's methods win over the
// real queue's (one level deeper); the key under reconcile reaches the real queue before the
// Execute, nothing the controller adds does.
type recQueue struct {
	realQueue
	*oracleharness.QueueLog
}

type realQueue struct {
	workqueue.TypedRateLimitingInterface[string]
}

func newHarness(s scenario) (*oracleharness.Harness, error) {
	h := oracleharness.New(s.Name)

	theVMI, err := oracleharness.Decode[v1.VirtualMachineInstance](s.VMI, "vmi")
	if err != nil {
		return nil, err
	}
	config, err := oracleharness.ClusterConfig(s.Configuration)
	if err != nil {
		return nil, err
	}
	clients := h.Clients(nil)
	kube, virt, client := clients.Kube, clients.Virt, clients.Client

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
	containerdisk.SetLocalDirectoryOnly(filepath.Join(oracleharness.EphemeralDiskDir, "container-disk-data"))
	templates, netGen := oracleharness.TemplateService(config, client, pvcInformer.GetStore(),
		quotaInformer.GetStore(), namespaceStore)
	hinter := topology.NewTopologyHinter(nodeInformer.GetStore(), vmiInformer.GetStore(), config)
	c, err := vmi.NewController(templates, vmiInformer, vmInformer, podInformer, pvcInformer,
		migrationInformer, storageClassInformer, h.Events, client, dataVolumeInformer,
		storageProfileInformer, cdiInformer, cdiConfigInformer, kubeVirtInformer, config, hinter,
		netGen, storageannotations.NewGenerator(config), netcontrollers.UpdateVMIStatus,
		func(field *k8sfield.Path, spec *v1.VirtualMachineInstanceSpec, cfg *virtconfig.ClusterConfig) []metav1.StatusCause {
			return netadmitter.ValidateCreation(field, spec, cfg)
		},
		netmigration.NewEvaluator(), nil, nil)
	if err != nil {
		return nil, err
	}
	h.Run = func() { c.Execute() }

	if err := vmiInformer.GetStore().Add(theVMI); err != nil {
		return nil, err
	}
	if err := virt.Tracker().Add(theVMI); err != nil {
		return nil, err
	}
	if err := oracleharness.Fill[v1.VirtualMachine](s.VMs, "vms", vmInformer.GetStore(), virt.Tracker(), nil); err != nil {
		return nil, err
	}
	// Only pods labelled kubevirt.io (launcher and attachment pods) are in virt-controller's pod
	// cache.
	if err := oracleharness.Fill[k8sv1.Pod](s.Pods, "pods", podInformer.GetStore(), kube.Tracker(), oracleharness.LauncherOnly); err != nil {
		return nil, err
	}
	if err := oracleharness.Fill[k8sv1.PersistentVolumeClaim](s.PVCs, "pvcs", pvcInformer.GetStore(), kube.Tracker(), nil); err != nil {
		return nil, err
	}
	if err := oracleharness.Fill[cdiv1.DataVolume](s.DataVolumes, "dataVolumes", dataVolumeInformer.GetStore(), nil, nil); err != nil {
		return nil, err
	}
	if err := oracleharness.Fill[storagev1.StorageClass](s.StorageClasses, "storageClasses", storageClassInformer.GetStore(), kube.Tracker(), nil); err != nil {
		return nil, err
	}
	if err := oracleharness.Fill[v1.VirtualMachineInstanceMigration](s.Migrations, "migrations", migrationInformer.GetStore(), virt.Tracker(), nil); err != nil {
		return nil, err
	}

	h.Key, err = virtcontroller.KeyFunc(theVMI)
	if err != nil {
		return nil, err
	}
	c.Queue.Add(h.Key)
	c.Queue = &recQueue{realQueue{c.Queue}, h.Queue}
	return h, nil
}
