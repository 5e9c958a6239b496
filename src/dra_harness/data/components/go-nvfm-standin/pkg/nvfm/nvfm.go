// Package nvfm is dra-harness's stand-in for NVIDIA's fabric manager bindings: the API NVIDIA's DRA
// driver compiles against, and no fabric manager behind it (every call answers ERROR_LIBRARY_NOT_FOUND).
package nvfm

// Return is a fabric manager status.
type Return int32

const (
	SUCCESS                 Return = 0
	ERROR_LIBRARY_NOT_FOUND Return = -100
)

func (r Return) String() string {
	if r == SUCCESS {
		return "SUCCESS"
	}
	return "fabric manager library not found (dra-harness stand-in for go-nvfm)"
}

func (r Return) Error() string { return r.String() }

// FabricPartitionId names a fabric partition.
type FabricPartitionId uint32

// FabricPartitionGpuInfo is one GPU of a partition, in the C layout's field names.
type FabricPartitionGpuInfo struct {
	PhysicalId          uint32
	Uuid                [80]int8
	PciBusId            [32]int8
	NumNvLinksAvailable uint32
	MaxNumNvLinks       uint32
	NvlinkLineRateMBps  uint32
}

// FabricPartitionInfo is one partition.
type FabricPartitionInfo struct {
	PartitionId uint32
	IsActive    uint32
	NumGpus     uint32
	GpuInfo     [16]FabricPartitionGpuInfo
}

// FabricPartitionList is every partition the fabric supports.
type FabricPartitionList struct {
	Version          uint32
	NumPartitions    uint32
	MaxNumPartitions uint32
	PartitionInfo    [64]FabricPartitionInfo
}

// Handle is a connection to the fabric manager.
type Handle interface {
	GetSupportedFabricPartitions() (FabricPartitionList, Return)
	ActivateFabricPartition(FabricPartitionId) Return
	DeactivateFabricPartition(FabricPartitionId) Return
	Disconnect() Return
}

// Interface is the library.
type Interface interface {
	Init() Return
	Shutdown() Return
	Connect(...ConnectOption) (Handle, Return)
}

type LibraryOption func(*library)
type ConnectOption func(*connection)

type library struct{ path string }
type connection struct {
	address string
	socket  bool
	timeout uint32
}

func WithLibraryPath(path string) LibraryOption { return func(l *library) { l.path = path } }
func WithAddress(address string) ConnectOption  { return func(c *connection) { c.address = address } }
func WithUnixSocket(path string) ConnectOption {
	return func(c *connection) { c.address, c.socket = path, true }
}
func WithTimeoutMs(ms uint32) ConnectOption { return func(c *connection) { c.timeout = ms } }

// New returns a library with no fabric manager behind it.
func New(opts ...LibraryOption) Interface {
	l := &library{}
	for _, o := range opts {
		o(l)
	}
	return l
}

func (l *library) Init() Return     { return ERROR_LIBRARY_NOT_FOUND }
func (l *library) Shutdown() Return { return ERROR_LIBRARY_NOT_FOUND }
func (l *library) Connect(opts ...ConnectOption) (Handle, Return) {
	return nil, ERROR_LIBRARY_NOT_FOUND
}
