// cdi-manifests prints, as one multi-document YAML stream on stdout, the objects the CDI operator
// (kubevirt.io/containerized-data-importer v1.64.0) would install for cdi-controller alone: CDI's
// CustomResourceDefinitions (the CDI CRD itself too: cdi-controller's config controller lists CDI
// objects, and none existing is how it knows no operator owns the CDIConfig) and the controller's ClusterRole / ClusterRoleBinding / Role /
// RoleBinding / ServiceAccount. They come from the operator's own resource generators, so the
// real-node test (bins/kvrs/tests/real_datavolume.rs) installs exactly what CDI ships, without a
// copy of CDI's manifests in the repo and without running CDI's operator (which would also want
// its apiserver, upload proxy, webhooks and images). The controller's Deployment is left out: the
// test runs cdi-controller as a host process. Built by scripts/cdi.sh.
package main

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"kubevirt.io/containerized-data-importer/pkg/operator/resources"
	"kubevirt.io/containerized-data-importer/pkg/operator/resources/cluster"
	"kubevirt.io/containerized-data-importer/pkg/operator/resources/namespaced"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cdi-manifests NAMESPACE")
		os.Exit(2)
	}
	ns := os.Args[1]
	var objs []client.Object
	for _, group := range []string{"crd-resources", "controller-rbac"} {
		rs, err := cluster.CreateStaticResourceGroup(group, &cluster.FactoryArgs{Namespace: ns})
		if err != nil {
			fail(err)
		}
		objs = append(objs, rs...)
	}
	rs, err := namespaced.CreateResourceGroup("controller", &namespaced.FactoryArgs{
		Namespace:       ns,
		OperatorVersion: "v1.64.0",
		ControllerImage: "kvrs.local/cdi-controller-unused:v1.64.0",
		PullPolicy:      "IfNotPresent",
		Verbosity:       "1",
	})
	if err != nil {
		fail(err)
	}
	for _, o := range rs {
		switch o.GetObjectKind().GroupVersionKind().Kind {
		case "Role", "RoleBinding", "ServiceAccount":
			objs = append(objs, o)
		}
	}
	cdiCRD, ok := resources.CDICRDs["cdi"]
	if !ok {
		fail(fmt.Errorf("CDI's generated CRDs have no \"cdi\" entry"))
	}
	fmt.Printf("---\n%s\n", cdiCRD)
	for _, o := range objs {
		if o.GetObjectKind().GroupVersionKind().Kind == "" {
			fail(fmt.Errorf("object %s has no kind", o.GetName()))
		}
		out, err := yaml.Marshal(runtime.Object(o))
		if err != nil {
			fail(err)
		}
		fmt.Printf("---\n%s", out)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cdi-manifests:", err)
	os.Exit(1)
}
