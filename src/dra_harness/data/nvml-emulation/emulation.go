// Command nvml-emulation is built with -buildmode=c-shared into libnvidia-ml.so.1: an NVML that answers
// for GPUs that are not there, so NVIDIA's DRA driver and NVML clients in containers can run on a CPU-only
// node.
//
// Why: no GPU machine is lent to us, yet the NVIDIA profile must meet NVIDIA's driver. The GPUs' properties
// (names, memory, compute capability, architecture, PCI device IDs, MIG profiles and placements) are
// NVIDIA's own, from go-nvml's mock GPU definitions (github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus); the
// identity of each GPU (UUID, PCI bus ID, minor number) is derived from the node's seed, so every process
// on a node (the driver, a container's probe) sees the same GPUs.
//
// What a process sees: GPU i exists for it when <dev>/nvidia<minor> does (the device node the driver's CDI
// spec injects), as the kernel driver only opens devices a container was given; <dev> is
// $DRA_HARNESS_NVML_DEV_ROOT, default /dev. The profile and seed are baked in at build time (-X) and may be
// overridden by $DRA_HARNESS_NVML_PROFILE and $DRA_HARNESS_NVML_SEED.
package main

// #include <stdint.h>
import "C"

import (
	"crypto/sha1"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// Baked in per node with -ldflags -X.
var (
	profileName = "h100"
	seed        = "dra-harness"
)

// A profile: the GPU model, how many, their PCI bus numbers, and whether MIG mode is on.
type profile struct {
	config gpus.Config
	buses  []int
	mig    bool
}

// Bus numbers spread over two NUMA halves as on an 8-GPU HGX board: illustrative, not one system's lspci.
var profiles = map[string]profile{
	"h100":     {gpus.H100_SXM5_80GB, []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}, false},
	"a100":     {gpus.A100_SXM4_80GB, []int{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd}, false},
	"a100-mig": {gpus.A100_SXM4_80GB, []int{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd}, true},
}

const (
	driverVersion     = "550.54.15" // as go-nvml's DGX mocks report
	nvmlVersion       = "12.550.54.15"
	cudaDriverVersion = 12040
	handleBase        = 0x6e760000 // handles are small integers in disguise: never dereferenced by callers
)

type gpu struct {
	config gpus.Config
	minor  int
	uuid   string
	busID  string
	bus    int
	mig    bool
}

var (
	mu      sync.Mutex
	inited  int
	visible []*gpu
)

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// uuidOf is a name-based UUID (version 5 layout) of the node's seed and the GPU's place: stable across processes.
func uuidOf(seed, profile string, minor int) string {
	sum := sha1.Sum([]byte(fmt.Sprintf("dra-harness/nvml-emulation/%s/%s/%d", seed, profile, minor)))
	b := sum[:16]
	b[6] = (b[6] & 0x0f) | 0x50
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func load() nvml.Return {
	name := env("DRA_HARNESS_NVML_PROFILE", profileName)
	p, ok := profiles[name]
	if !ok {
		return nvml.ERROR_LIBRARY_NOT_FOUND
	}
	s := env("DRA_HARNESS_NVML_SEED", seed)
	dev := env("DRA_HARNESS_NVML_DEV_ROOT", "/dev")
	visible = nil
	for minor, bus := range p.buses {
		if _, err := os.Stat(filepath.Join(dev, fmt.Sprintf("nvidia%d", minor))); err != nil {
			continue
		}
		visible = append(visible, &gpu{config: p.config, minor: minor, uuid: uuidOf(s, name, minor),
			busID: fmt.Sprintf("00000000:%02X:00.0", bus), bus: bus, mig: p.mig})
	}
	return nvml.SUCCESS
}

func device(h C.uintptr_t) (*gpu, nvml.Return) {
	mu.Lock()
	defer mu.Unlock()
	if inited == 0 {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	i := int(h) - handleBase
	if i < 0 || i >= len(visible) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return visible[i], nvml.SUCCESS
}

func handle(i int) C.uintptr_t { return C.uintptr_t(handleBase + i) }

// put copies s, NUL-terminated, into a C buffer of n bytes.
func put(s string, buf *C.char, n C.uint) nvml.Return {
	if buf == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if len(s)+1 > int(n) {
		return nvml.ERROR_INSUFFICIENT_SIZE
	}
	out := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	copy(out, s)
	out[len(s)] = 0
	return nvml.SUCCESS
}

func ret(r nvml.Return) C.int { return C.int(r) }

//export emuInit
func emuInit() C.int {
	mu.Lock()
	defer mu.Unlock()
	if inited == 0 {
		if r := load(); r != nvml.SUCCESS {
			return ret(r)
		}
	}
	inited++
	return ret(nvml.SUCCESS)
}

//export emuShutdown
func emuShutdown() C.int {
	mu.Lock()
	defer mu.Unlock()
	if inited == 0 {
		return ret(nvml.ERROR_UNINITIALIZED)
	}
	inited--
	return ret(nvml.SUCCESS)
}

//export emuSystemString
func emuSystemString(which C.int, buf *C.char, n C.uint) C.int {
	switch which {
	case 0:
		return ret(put(driverVersion, buf, n))
	case 1:
		return ret(put(nvmlVersion, buf, n))
	}
	return ret(nvml.ERROR_INVALID_ARGUMENT)
}

//export emuCudaDriverVersion
func emuCudaDriverVersion(v *C.int) C.int {
	if v == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	*v = cudaDriverVersion
	return ret(nvml.SUCCESS)
}

//export emuDeviceCount
func emuDeviceCount(n *C.uint) C.int {
	mu.Lock()
	defer mu.Unlock()
	if inited == 0 {
		return ret(nvml.ERROR_UNINITIALIZED)
	}
	if n == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	*n = C.uint(len(visible))
	return ret(nvml.SUCCESS)
}

//export emuHandleByIndex
func emuHandleByIndex(i C.uint, h *C.uintptr_t) C.int {
	mu.Lock()
	defer mu.Unlock()
	if inited == 0 {
		return ret(nvml.ERROR_UNINITIALIZED)
	}
	if int(i) >= len(visible) || h == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	*h = handle(int(i))
	return ret(nvml.SUCCESS)
}

// emuHandleBy finds a GPU by UUID (which 0) or PCI bus ID (which 1).
//
//export emuHandleBy
func emuHandleBy(which C.int, key *C.char, h *C.uintptr_t) C.int {
	mu.Lock()
	defer mu.Unlock()
	if inited == 0 {
		return ret(nvml.ERROR_UNINITIALIZED)
	}
	if key == nil || h == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	k := C.GoString(key)
	for i, g := range visible {
		if (which == 0 && k == g.uuid) || (which == 1 && strings.EqualFold(normalBus(k), g.busID)) {
			*h = handle(i)
			return ret(nvml.SUCCESS)
		}
	}
	return ret(nvml.ERROR_NOT_FOUND)
}

// normalBus writes a bus ID as NVML does: an 8-digit domain ("0000:18:00.0" -> "00000000:18:00.0").
func normalBus(id string) string {
	parts := strings.SplitN(id, ":", 2)
	if len(parts) == 2 && len(parts[0]) < 8 {
		return strings.Repeat("0", 8-len(parts[0])) + parts[0] + ":" + parts[1]
	}
	return id
}

// emuDeviceString: name (0), UUID (1), PCI bus ID (2) or serial (3) of a GPU.
//
//export emuDeviceString
func emuDeviceString(h C.uintptr_t, which C.int, buf *C.char, n C.uint) C.int {
	g, r := device(h)
	if r != nvml.SUCCESS {
		return ret(r)
	}
	switch which {
	case 0:
		return ret(put(g.config.Name, buf, n))
	case 1:
		return ret(put(g.uuid, buf, n))
	case 2:
		return ret(put(g.busID, buf, n))
	case 3:
		return ret(put(fmt.Sprintf("1652%09d", g.minor+g.bus*100), buf, n))
	}
	return ret(nvml.ERROR_INVALID_ARGUMENT)
}

// emuDeviceInt: minor (0), index (1), compute capability major (2) and minor (3), architecture (4),
// brand (5), MIG mode current/pending (6), max MIG devices (7), compute mode (8), persistence mode (9),
// module ID (10), NUMA node (11).
//
//export emuDeviceInt
func emuDeviceInt(h C.uintptr_t, which C.int, v *C.int) C.int {
	g, r := device(h)
	if r != nvml.SUCCESS {
		return ret(r)
	}
	if v == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	switch which {
	case 0:
		*v = C.int(g.minor)
	case 1:
		*v = C.int(int(h) - handleBase)
	case 2:
		*v = C.int(g.config.CudaMajor)
	case 3:
		*v = C.int(g.config.CudaMinor)
	case 4:
		*v = C.int(g.config.Architecture)
	case 5:
		*v = C.int(g.config.Brand)
	case 6:
		if len(g.config.MIGProfiles.GpuInstanceProfiles) == 0 {
			return ret(nvml.ERROR_NOT_SUPPORTED)
		}
		*v = 0
		if g.mig {
			*v = 1
		}
	case 7:
		if len(g.config.MIGProfiles.GpuInstanceProfiles) == 0 {
			return ret(nvml.ERROR_NOT_SUPPORTED)
		}
		*v = 7
	case 8:
		*v = C.int(nvml.COMPUTEMODE_DEFAULT)
	case 9:
		*v = 1
	case 10:
		*v = C.int(g.minor + 1)
	case 11:
		*v = 0
		if g.bus >= 0x80 {
			*v = 1
		}
	default:
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	return ret(nvml.SUCCESS)
}

//export emuMemory
func emuMemory(h C.uintptr_t, total, free, used *C.ulonglong) C.int {
	g, r := device(h)
	if r != nvml.SUCCESS {
		return ret(r)
	}
	*total = C.ulonglong(g.config.MemoryMB * 1024 * 1024)
	*free, *used = *total, 0
	return ret(nvml.SUCCESS)
}

//export emuPci
func emuPci(h C.uintptr_t, info unsafe.Pointer) C.int {
	g, r := device(h)
	if r != nvml.SUCCESS {
		return ret(r)
	}
	if info == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	p := (*nvml.PciInfo)(info) // the C struct and go-nvml's type share one layout (cgo -godefs)
	*p = nvml.PciInfo{Domain: 0, Bus: uint32(g.bus), Device: 0, PciDeviceId: g.config.PciDeviceId,
		PciSubSystemId: g.config.PciDeviceId&0xffff0000 | 0x10de}
	legacy := fmt.Sprintf("0000:%02X:00.0", g.bus)
	for i := range legacy {
		p.BusIdLegacy[i] = int8(legacy[i])
	}
	for i := range g.busID {
		p.BusId[i] = int8(g.busID[i])
	}
	return ret(nvml.SUCCESS)
}

//export emuGpuInstanceProfile
func emuGpuInstanceProfile(h C.uintptr_t, id C.uint, info unsafe.Pointer) C.int {
	g, r := device(h)
	if r != nvml.SUCCESS {
		return ret(r)
	}
	p, ok := g.config.MIGProfiles.GpuInstanceProfiles[int(id)]
	if !ok {
		return ret(nvml.ERROR_NOT_SUPPORTED)
	}
	*(*nvml.GpuInstanceProfileInfo)(info) = p
	return ret(nvml.SUCCESS)
}

// emuPlacements writes the profile's possible placements (NVIDIA's, from the mock definitions) into
// placements (nil: only the count), as nvmlDeviceGetGpuInstancePossiblePlacements_v2 does.
//
//export emuPlacements
func emuPlacements(h C.uintptr_t, id C.uint, placements unsafe.Pointer, count *C.uint) C.int {
	g, r := device(h)
	if r != nvml.SUCCESS {
		return ret(r)
	}
	if count == nil {
		return ret(nvml.ERROR_INVALID_ARGUMENT)
	}
	if _, ok := g.config.MIGProfiles.GpuInstanceProfiles[int(id)]; !ok {
		return ret(nvml.ERROR_NOT_SUPPORTED)
	}
	possible := g.config.MIGProfiles.GpuInstancePlacements[int(id)]
	if placements != nil {
		if int(*count) < len(possible) {
			*count = C.uint(len(possible))
			return ret(nvml.ERROR_INSUFFICIENT_SIZE)
		}
		copy(unsafe.Slice((*nvml.GpuInstancePlacement)(placements), len(possible)), possible)
	}
	*count = C.uint(len(possible))
	return ret(nvml.SUCCESS)
}

func main() {}
