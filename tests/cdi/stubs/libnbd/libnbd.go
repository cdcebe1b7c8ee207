// Package libnbd is kvrs's compile-only stand-in for libguestfs.org/libnbd v1.11.5, which the Go
// module proxy refuses (403). CDI's importer imports it only for its VMware VDDK data source
// (pkg/importer/vddk-datasource_amd64.go); the http, blank and registry sources kvrs tests never
// touch it. It carries the names that file needs and a Create that always fails, so a VDDK import
// with this build ends in a clear error instead of a crash.
package libnbd

import "errors"

// ErrUnavailable is what every entry point returns.
var ErrUnavailable = errors.New("libnbd is not available in this build of cdi-importer (kvrs compile-only stub: the Go module proxy refuses libguestfs.org/libnbd)")

// Flags CDI reads from block status extents and passes to BlockStatus.
const (
	CMD_FLAG_REQ_ONE = uint32(0x08)
	STATE_HOLE       = uint32(1)
	STATE_ZERO       = uint32(2)
)

// LibnbdError is the error type libnbd's calls return.
type LibnbdError struct {
	Op     string
	Errmsg string
	Errno  int
}

func (e *LibnbdError) Error() string { return e.Op + ": " + e.Errmsg }

// PreadOptargs are Pread's optional arguments.
type PreadOptargs struct{}

// BlockStatusOptargs are BlockStatus's optional arguments.
type BlockStatusOptargs struct {
	FlagsSet bool
	Flags    uint32
}

// ExtentCallback receives block status extents.
type ExtentCallback func(metacontext string, offset uint64, entries []uint32, err *int) int

// Libnbd is a handle; none is ever created by this stub.
type Libnbd struct{}

// Create always fails: there is no libnbd behind this package.
func Create() (*Libnbd, error) { return nil, ErrUnavailable }

func (*Libnbd) AddMetaContext(string) error { return ErrUnavailable }
func (*Libnbd) ConnectUri(string) error     { return ErrUnavailable }
func (*Libnbd) GetSize() (uint64, error)    { return 0, ErrUnavailable }
func (*Libnbd) Pread([]byte, uint64, *PreadOptargs) error {
	return ErrUnavailable
}
func (*Libnbd) BlockStatus(uint64, uint64, ExtentCallback, *BlockStatusOptargs) error {
	return ErrUnavailable
}
func (*Libnbd) Close() *LibnbdError { return nil }
