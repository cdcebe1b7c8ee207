// Package v1beta1 is a compile-only stand-in (tests/mixed/stubs/README.md).
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// VirtualMachineTemplate carries only object metadata here.
type VirtualMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// DeepCopyObject makes it a runtime.Object.
func (t *VirtualMachineTemplate) DeepCopyObject() runtime.Object {
	if t == nil {
		return nil
	}
	out := &VirtualMachineTemplate{TypeMeta: t.TypeMeta}
	t.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}
