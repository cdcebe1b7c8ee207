// Package libnbd is kvrs's compile-only stand-in for the libnbd Go bindings: the names that
// KubeVirt's pkg/storage/nbdclient (backup/CBT export reads) refers to. Create always fails, so
// any NBD request answers with an error; booting, syncing and killing a VM never reach it.
package libnbd

import "errors"

// ErrUnavailable is what every call returns: this build has no libnbd.
var ErrUnavailable = errors.New("libnbd is not available in this build (kvrs compile-only stand-in)")

// Meta contexts and extent flags nbdclient compares against (NBD protocol values).
const (
	CONTEXT_BASE_ALLOCATION   = "base:allocation"
	CONTEXT_QEMU_DIRTY_BITMAP = "qemu:dirty-bitmap:"
	STATE_HOLE                = 1
	STATE_ZERO                = 2
	STATE_DIRTY               = 1
)

// LibnbdExtent is one block-status extent.
type LibnbdExtent struct {
	Length uint64
	Flags  uint64
}

// Libnbd is an NBD handle; none is ever created.
type Libnbd struct{}

// Create fails: there is no libnbd here.
func Create() (*Libnbd, error) { return nil, ErrUnavailable }

func (*Libnbd) Close() error                              { return nil }
func (*Libnbd) AddMetaContext(string) error               { return ErrUnavailable }
func (*Libnbd) CanMetaContext(string) (bool, error)       { return false, ErrUnavailable }
func (*Libnbd) GetSize() (uint64, error)                  { return 0, ErrUnavailable }
func (*Libnbd) SetExportName(string) error                { return ErrUnavailable }
func (*Libnbd) ConnectUnix(string) error                  { return ErrUnavailable }
func (*Libnbd) Pread([]byte, uint64, *PreadOptargs) error { return ErrUnavailable }

// ExtentCallback receives the extents of one BlockStatus64 reply.
type ExtentCallback func(metacontext string, offset uint64, entries []LibnbdExtent, err *int) int

func (*Libnbd) BlockStatus64(uint64, uint64, ExtentCallback, *BlockStatus64Optargs) error {
	return ErrUnavailable
}

// PreadOptargs and BlockStatus64Optargs are the optional arguments of those calls.
type PreadOptargs struct{}
type BlockStatus64Optargs struct{}
