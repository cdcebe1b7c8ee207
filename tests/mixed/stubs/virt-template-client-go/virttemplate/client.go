// Package virttemplate is a compile-only stand-in (tests/mixed/stubs/README.md): its client
// constructor always fails.
package virttemplate

import (
	"errors"

	"k8s.io/client-go/rest"
)

// TemplateV1beta1Interface is the API group's client.
type TemplateV1beta1Interface interface {
	RESTClient() rest.Interface
}

// Interface is the clientset.
type Interface interface {
	TemplateV1beta1() TemplateV1beta1Interface
}

// NewForConfig fails: the kvrs harness has no VirtualMachineTemplate client.
func NewForConfig(*rest.Config) (Interface, error) {
	return nil, errors.New("virt-template client: not available in the kvrs mixed-fleet harness")
}
