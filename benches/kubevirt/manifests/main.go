// Command manifests prints, as one JSON `v1/List`, what KubeVirt v1.9.0's own virt-controller
// needs on an API server before it can run: every CRD KubeVirt's operator installs and the
// controller's ServiceAccount, ClusterRole, Role and bindings — taken from KubeVirt's operator
// packages rather than written again, so the benchmark's KubeVirt runs with KubeVirt's objects.
//
// It is built inside a KubeVirt v1.9.0 source tree (with its vendor/ directory) by
// benches/kubevirt/build.sh, because the Go module proxy refuses some of the modules KubeVirt's
// operator packages import (kubevirt.io/virt-template-*). Not part of CI.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/rbac"
)

func main() {
	namespace := flag.String("namespace", "kubevirt", "the namespace virt-controller runs in")
	flag.Parse()

	crds := []func() (*extv1.CustomResourceDefinition, error){
		components.NewVirtualMachineInstanceCrd, components.NewPresetCrd, components.NewReplicaSetCrd,
		components.NewVirtualMachineCrd, components.NewVirtualMachineInstanceMigrationCrd,
		components.NewVirtualMachineSnapshotCrd, components.NewVirtualMachineSnapshotContentCrd,
		components.NewVirtualMachineRestoreCrd, components.NewVirtualMachineInstancetypeCrd,
		components.NewVirtualMachineClusterInstancetypeCrd, components.NewVirtualMachinePoolCrd,
		components.NewMigrationPolicyCrd, components.NewVirtualMachinePreferenceCrd,
		components.NewVirtualMachineClusterPreferenceCrd, components.NewVirtualMachineExportCrd,
		components.NewVirtualMachineCloneCrd, components.NewVirtualMachineBackupCrd,
		components.NewVirtualMachineBackupTrackerCrd, components.NewPluginCrd,
		components.NewKubeVirtCrd,
	}
	var objects []runtime.Object
	for _, newCrd := range crds {
		crd, err := newCrd()
		if err != nil {
			fail(err)
		}
		objects = append(objects, crd)
	}
	objects = append(objects, rbac.GetAllController(*namespace, true)...)

	items := make([]map[string]interface{}, 0, len(objects))
	for _, obj := range objects {
		raw, err := json.Marshal(obj)
		if err != nil {
			fail(err)
		}
		var item map[string]interface{}
		if err := json.Unmarshal(raw, &item); err != nil {
			fail(err)
		}
		// What the API server sets itself: an apply must not carry it.
		delete(item, "status")
		if meta, ok := item["metadata"].(map[string]interface{}); ok {
			delete(meta, "creationTimestamp")
		}
		items = append(items, item)
	}
	out := map[string]interface{}{"apiVersion": "v1", "kind": "List", "items": items}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "manifests:", err)
	os.Exit(1)
}
