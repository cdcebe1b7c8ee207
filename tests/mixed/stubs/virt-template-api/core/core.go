// Package core is a compile-only stand-in (tests/mixed/stubs/README.md): the names
// kubevirt.io/kubevirt/pkg/controller refers to.
package core

const (
	GroupName            = "template.kubevirt.io"
	SingularResourceName = "virtualmachinetemplate"
	PluralResourceName   = "virtualmachinetemplates"
)
