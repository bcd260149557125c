// Command bridge is built with -buildmode=c-shared into libnvidia-ml.so.1: the NVML C interface over the
// machine that package machine builds from NVIDIA's go-nvml mock servers. It exports the calls that
// NVIDIA's gpu-feature-discovery (through go-nvml/go-nvlib) and nvidia-ml-py make while labelling a node;
// any other NVML symbol is absent, as in a driver too old to have it. A GPU can be made to fail while the
// library is in use (faults.go). Test-only.
package main

/*
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef void *nvmlGpuInstance_t;
typedef void *nvmlComputeInstance_t;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;
typedef struct {
	unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
		sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
	unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;
typedef struct { unsigned int start, size; } nvmlPlacement_t;
typedef struct {
	unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
		decoderCount, encoderCount, jpegCount, ofaCount;
	unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
	unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
		copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
	unsigned long long memorySizeMB;
	char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;
typedef struct {
	nvmlDevice_t device;
	unsigned int id, profileId;
	nvmlPlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
	unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
		sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;
typedef struct {
	unsigned int version, id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
		sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
	char name[96];
} nvmlComputeInstanceProfileInfo_v2_t;
typedef struct {
	nvmlDevice_t device;
	nvmlGpuInstance_t gpuInstance;
	unsigned int id, profileId;
	nvmlPlacement_t placement;
} nvmlComputeInstanceInfo_t;

typedef struct {
	unsigned char clusterUuid[16];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
} nvmlGpuFabricInfo_t;
typedef struct {
	unsigned int version;
	unsigned char clusterUuid[16];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
	unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

static void put(char *dst, const char *src, unsigned int len) {
	if (len == 0) return;
	strncpy(dst, src, len - 1);
	dst[len - 1] = 0;
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"gpu-labeller/peers/nvidia-mock-nvml/machine"
)

// NVML return codes and constants, as in nvml.h.
const (
	success          = C.nvmlReturn_t(nvml.SUCCESS)
	uninitialized    = C.nvmlReturn_t(nvml.ERROR_UNINITIALIZED)
	invalidArgument  = C.nvmlReturn_t(nvml.ERROR_INVALID_ARGUMENT)
	notSupported     = C.nvmlReturn_t(nvml.ERROR_NOT_SUPPORTED)
	insufficientSize = C.nvmlReturn_t(nvml.ERROR_INSUFFICIENT_SIZE)
	notFound         = C.nvmlReturn_t(nvml.ERROR_NOT_FOUND)
	unknownError     = C.nvmlReturn_t(nvml.ERROR_UNKNOWN)
)

// state: the machine and the opaque handles given out for its objects. A handle is a byte of C memory,
// so that C callers get a stable, unique pointer and no Go pointer crosses into C.
var state struct {
	sync.Mutex
	machine  *machine.Machine
	inits    int
	objects  map[unsafe.Pointer]any
	handles  map[any]unsafe.Pointer
	errorMsg map[C.nvmlReturn_t]*C.char
}

func handle(obj any) unsafe.Pointer {
	if h, ok := state.handles[obj]; ok {
		return h
	}
	h := C.malloc(1)
	state.objects[h] = obj
	state.handles[obj] = h
	return h
}

func lookup[T any](h unsafe.Pointer) (T, bool) {
	obj, ok := state.objects[h].(T)
	return obj, ok
}

func initialize() C.nvmlReturn_t {
	state.Lock()
	defer state.Unlock()
	if state.machine == nil {
		// The C environment, not Go's copy of it taken at load: a process may set it after loading us.
		m, err := machine.FromLookup(cgetenv)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mock NVML:", err)
			return unknownError
		}
		state.machine = m
		state.objects = map[unsafe.Pointer]any{}
		state.handles = map[any]unsafe.Pointer{}
	}
	state.inits++
	if path := cgetenv("MOCK_NVML_INIT_LOG"); path != "" {
		// One line per nvmlInit: how benchmarks count a daemon's passes from outside it.
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.WriteString("nvmlInit\n")
			_ = f.Close()
		}
	}
	return success
}

func ready() bool { return state.machine != nil && state.inits > 0 }

//export nvmlInit_v2
func nvmlInit_v2() C.nvmlReturn_t { return initialize() }

//export nvmlInit
func nvmlInit() C.nvmlReturn_t { return initialize() }

//export nvmlInitWithFlags
func nvmlInitWithFlags(flags C.uint) C.nvmlReturn_t { return initialize() }

//export nvmlShutdown
func nvmlShutdown() C.nvmlReturn_t {
	state.Lock()
	defer state.Unlock()
	if state.inits == 0 {
		return uninitialized
	}
	state.inits--
	if state.inits == 0 {
		// The next nvmlInit reads the environment again, as a driver reads the hardware again.
		for h := range state.objects {
			C.free(h)
		}
		state.machine, state.objects, state.handles = nil, nil, nil
	}
	return success
}

func cgetenv(name string) string {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if v := C.getenv(cname); v != nil {
		return C.GoString(v)
	}
	return ""
}

//export nvmlErrorString
func nvmlErrorString(r C.nvmlReturn_t) *C.char {
	state.Lock()
	defer state.Unlock()
	if state.errorMsg == nil {
		state.errorMsg = map[C.nvmlReturn_t]*C.char{}
	}
	if s, ok := state.errorMsg[r]; ok {
		return s
	}
	s := C.CString(nvml.Return(r).Error())
	state.errorMsg[r] = s
	return s
}

func putString(dst *C.char, length C.uint, s string) C.nvmlReturn_t {
	if dst == nil {
		return invalidArgument
	}
	if int(length) < len(s)+1 {
		return insufficientSize
	}
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	C.put(dst, cs, length)
	return success
}

//export nvmlSystemGetDriverVersion
func nvmlSystemGetDriverVersion(version *C.char, length C.uint) C.nvmlReturn_t {
	if !ready() {
		return uninitialized
	}
	return putString(version, length, state.machine.Server.DriverVersion)
}

//export nvmlSystemGetNVMLVersion
func nvmlSystemGetNVMLVersion(version *C.char, length C.uint) C.nvmlReturn_t {
	if !ready() {
		return uninitialized
	}
	return putString(version, length, state.machine.Server.NvmlVersion)
}

//export nvmlSystemGetCudaDriverVersion
func nvmlSystemGetCudaDriverVersion(v *C.int) C.nvmlReturn_t {
	if !ready() {
		return uninitialized
	}
	if v == nil {
		return invalidArgument
	}
	*v = C.int(state.machine.Server.CudaDriverVersion)
	return success
}

//export nvmlSystemGetCudaDriverVersion_v2
func nvmlSystemGetCudaDriverVersion_v2(v *C.int) C.nvmlReturn_t {
	return nvmlSystemGetCudaDriverVersion(v)
}

//export nvmlDeviceGetCount_v2
func nvmlDeviceGetCount_v2(count *C.uint) C.nvmlReturn_t {
	if !ready() {
		return uninitialized
	}
	if count == nil {
		return invalidArgument
	}
	*count = C.uint(len(state.machine.Devices))
	return success
}

//export nvmlDeviceGetCount
func nvmlDeviceGetCount(count *C.uint) C.nvmlReturn_t { return nvmlDeviceGetCount_v2(count) }

//export nvmlDeviceGetHandleByIndex_v2
func nvmlDeviceGetHandleByIndex_v2(index C.uint, dev *C.nvmlDevice_t) C.nvmlReturn_t {
	if !ready() {
		return uninitialized
	}
	state.Lock()
	defer state.Unlock()
	if dev == nil || int(index) >= len(state.machine.Devices) {
		return invalidArgument
	}
	if code := faultOf(int(index)); code != success {
		return code
	}
	*dev = C.nvmlDevice_t(handle(state.machine.Devices[index]))
	return success
}

//export nvmlDeviceGetHandleByIndex
func nvmlDeviceGetHandleByIndex(index C.uint, dev *C.nvmlDevice_t) C.nvmlReturn_t {
	return nvmlDeviceGetHandleByIndex_v2(index, dev)
}

// gpu and mig resolve a device handle to a full GPU or a MIG device.
func gpu(h C.nvmlDevice_t) (*server.Device, bool) {
	state.Lock()
	defer state.Unlock()
	return lookup[*server.Device](unsafe.Pointer(h))
}

func mig(h C.nvmlDevice_t) (*machine.Mig, bool) {
	state.Lock()
	defer state.Unlock()
	return lookup[*machine.Mig](unsafe.Pointer(h))
}

//export nvmlDeviceGetName
func nvmlDeviceGetName(h C.nvmlDevice_t, name *C.char, length C.uint) C.nvmlReturn_t {
	if code := faulted(h); code != success {
		return code
	}
	if d, ok := gpu(h); ok {
		return putString(name, length, d.Config.Name)
	}
	if m, ok := mig(h); ok {
		return putString(name, length, m.Parent.Config.Name+" MIG "+profileName(m))
	}
	return invalidArgument
}

// profileName is NVML's name for a MIG device's profile, "<gi>g.<memory>gb" (whole GiB, rounded up).
func profileName(m *machine.Mig) string {
	gb := (m.GIInfo.MemorySizeMB + 1023) / 1024
	if m.CIInfo.SliceCount == m.GIInfo.SliceCount {
		return fmt.Sprintf("%dg.%dgb", m.GIInfo.SliceCount, gb)
	}
	return fmt.Sprintf("%dc.%dg.%dgb", m.CIInfo.SliceCount, m.GIInfo.SliceCount, gb)
}

//export nvmlDeviceGetUUID
func nvmlDeviceGetUUID(h C.nvmlDevice_t, uuid *C.char, length C.uint) C.nvmlReturn_t {
	if code := faulted(h); code != success {
		return code
	}
	if d, ok := gpu(h); ok {
		return putString(uuid, length, d.UUID)
	}
	if m, ok := mig(h); ok {
		return putString(uuid, length, m.UUID)
	}
	return invalidArgument
}

//export nvmlDeviceGetIndex
func nvmlDeviceGetIndex(h C.nvmlDevice_t, index *C.uint) C.nvmlReturn_t {
	d, ok := gpu(h)
	if !ok || index == nil {
		return invalidArgument
	}
	*index = C.uint(d.Index)
	return success
}

//export nvmlDeviceGetMinorNumber
func nvmlDeviceGetMinorNumber(h C.nvmlDevice_t, minor *C.uint) C.nvmlReturn_t {
	d, ok := gpu(h)
	if !ok || minor == nil {
		return invalidArgument
	}
	*minor = C.uint(d.Minor)
	return success
}

func memoryBytes(h C.nvmlDevice_t) (uint64, bool) {
	if d, ok := gpu(h); ok {
		return d.MemoryInfo.Total, true
	}
	if m, ok := mig(h); ok {
		return m.GIInfo.MemorySizeMB * 1024 * 1024, true
	}
	return 0, false
}

//export nvmlDeviceGetMemoryInfo
func nvmlDeviceGetMemoryInfo(h C.nvmlDevice_t, mem *C.nvmlMemory_t) C.nvmlReturn_t {
	if code := faulted(h); code != success {
		return code
	}
	total, ok := memoryBytes(h)
	if !ok || mem == nil {
		return invalidArgument
	}
	*mem = C.nvmlMemory_t{total: C.ulonglong(total), free: C.ulonglong(total)}
	return success
}

//export nvmlDeviceGetMemoryInfo_v2
func nvmlDeviceGetMemoryInfo_v2(h C.nvmlDevice_t, mem *C.nvmlMemory_v2_t) C.nvmlReturn_t {
	if code := faulted(h); code != success {
		return code
	}
	total, ok := memoryBytes(h)
	if !ok || mem == nil {
		return invalidArgument
	}
	*mem = C.nvmlMemory_v2_t{version: mem.version, total: C.ulonglong(total), free: C.ulonglong(total)}
	return success
}

//export nvmlDeviceGetCudaComputeCapability
func nvmlDeviceGetCudaComputeCapability(h C.nvmlDevice_t, major, minor *C.int) C.nvmlReturn_t {
	if code := faulted(h); code != success {
		return code
	}
	d, ok := gpu(h)
	if !ok {
		if m, isMig := mig(h); isMig {
			d = m.Parent
		} else {
			return invalidArgument
		}
	}
	if major == nil || minor == nil {
		return invalidArgument
	}
	*major, *minor = C.int(d.Config.CudaMajor), C.int(d.Config.CudaMinor)
	return success
}

//export nvmlDeviceGetBrand
func nvmlDeviceGetBrand(h C.nvmlDevice_t, brand *C.int) C.nvmlReturn_t {
	d, ok := gpu(h)
	if !ok || brand == nil {
		return invalidArgument
	}
	*brand = C.int(d.Config.Brand)
	return success
}

//export nvmlDeviceGetArchitecture
func nvmlDeviceGetArchitecture(h C.nvmlDevice_t, arch *C.uint) C.nvmlReturn_t {
	d, ok := gpu(h)
	if !ok || arch == nil {
		return invalidArgument
	}
	*arch = C.uint(d.Config.Architecture)
	return success
}

func pciInfo(h C.nvmlDevice_t, info *C.nvmlPciInfo_t) C.nvmlReturn_t {
	if code := faulted(h); code != success {
		return code
	}
	d, ok := gpu(h)
	if !ok || info == nil {
		return invalidArgument
	}
	var bus, dev, fn uint
	var domain uint
	if _, err := fmt.Sscanf(d.PciBusID, "%08x:%02x:%02x.%x", &domain, &bus, &dev, &fn); err != nil {
		return unknownError
	}
	*info = C.nvmlPciInfo_t{
		domain:      C.uint(domain),
		bus:         C.uint(bus),
		device:      C.uint(dev),
		pciDeviceId: C.uint(d.Config.PciDeviceId),
	}
	legacy := C.CString(fmt.Sprintf("%04X:%02X:%02X.%X", domain, bus, dev, fn))
	full := C.CString(d.PciBusID)
	defer C.free(unsafe.Pointer(legacy))
	defer C.free(unsafe.Pointer(full))
	C.put(&info.busIdLegacy[0], legacy, 16)
	C.put(&info.busId[0], full, 32)
	return success
}

//export nvmlDeviceGetPciInfo_v3
func nvmlDeviceGetPciInfo_v3(h C.nvmlDevice_t, info *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return pciInfo(h, info)
}

//export nvmlDeviceGetPciInfo_v2
func nvmlDeviceGetPciInfo_v2(h C.nvmlDevice_t, info *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return pciInfo(h, info)
}

//export nvmlDeviceGetPciInfo
func nvmlDeviceGetPciInfo(h C.nvmlDevice_t, info *C.nvmlPciInfo_t) C.nvmlReturn_t {
	return pciInfo(h, info)
}

//export nvmlDeviceGetVirtualizationMode
func nvmlDeviceGetVirtualizationMode(h C.nvmlDevice_t, mode *C.int) C.nvmlReturn_t {
	if _, ok := gpu(h); !ok || mode == nil {
		return invalidArgument
	}
	*mode = C.int(state.machine.VirtualizationMode)
	return success
}

// ---- MIG ----

//export nvmlDeviceGetMigMode
func nvmlDeviceGetMigMode(h C.nvmlDevice_t, current, pending *C.uint) C.nvmlReturn_t {
	if code := faulted(h); code != success {
		return code
	}
	d, ok := gpu(h)
	if !ok || current == nil || pending == nil {
		return invalidArgument
	}
	if len(d.Config.MIGProfiles.GpuInstanceProfiles) == 0 {
		return notSupported
	}
	*current, *pending = C.uint(d.MigMode), C.uint(d.MigMode)
	return success
}

//export nvmlDeviceGetMaxMigDeviceCount
func nvmlDeviceGetMaxMigDeviceCount(h C.nvmlDevice_t, count *C.uint) C.nvmlReturn_t {
	d, ok := gpu(h)
	if !ok || count == nil {
		return invalidArgument
	}
	if len(d.Config.MIGProfiles.GpuInstanceProfiles) == 0 {
		return notSupported
	}
	// As many as the smallest profile allows.
	most := 0
	for _, p := range d.Config.MIGProfiles.GpuInstanceProfiles {
		most = max(most, int(p.InstanceCount))
	}
	*count = C.uint(most)
	return success
}

//export nvmlDeviceGetMigDeviceHandleByIndex
func nvmlDeviceGetMigDeviceHandleByIndex(h C.nvmlDevice_t, index C.uint, out *C.nvmlDevice_t) C.nvmlReturn_t {
	d, ok := gpu(h)
	if !ok || out == nil {
		return invalidArgument
	}
	state.Lock()
	defer state.Unlock()
	migs := state.machine.Migs[d]
	if int(index) >= len(migs) {
		return notFound
	}
	*out = C.nvmlDevice_t(handle(migs[index]))
	return success
}

//export nvmlDeviceIsMigDeviceHandle
func nvmlDeviceIsMigDeviceHandle(h C.nvmlDevice_t, isMig *C.uint) C.nvmlReturn_t {
	if isMig == nil {
		return invalidArgument
	}
	if _, ok := mig(h); ok {
		*isMig = 1
		return success
	}
	if _, ok := gpu(h); ok {
		*isMig = 0
		return success
	}
	return invalidArgument
}

//export nvmlDeviceGetDeviceHandleFromMigDeviceHandle
func nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h C.nvmlDevice_t, out *C.nvmlDevice_t) C.nvmlReturn_t {
	m, ok := mig(h)
	if !ok || out == nil {
		return invalidArgument
	}
	state.Lock()
	defer state.Unlock()
	*out = C.nvmlDevice_t(handle(m.Parent))
	return success
}

//export nvmlDeviceGetGpuInstanceId
func nvmlDeviceGetGpuInstanceId(h C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	m, ok := mig(h)
	if !ok || id == nil {
		return invalidArgument
	}
	*id = C.uint(m.GI.Info.Id)
	return success
}

//export nvmlDeviceGetComputeInstanceId
func nvmlDeviceGetComputeInstanceId(h C.nvmlDevice_t, id *C.uint) C.nvmlReturn_t {
	m, ok := mig(h)
	if !ok || id == nil {
		return invalidArgument
	}
	*id = C.uint(m.CI.Info.Id)
	return success
}

//export nvmlDeviceGetAttributes_v2
func nvmlDeviceGetAttributes_v2(h C.nvmlDevice_t, a *C.nvmlDeviceAttributes_t) C.nvmlReturn_t {
	m, ok := mig(h)
	if !ok || a == nil {
		return notSupported
	}
	*a = C.nvmlDeviceAttributes_t{
		multiprocessorCount:       C.uint(m.CIInfo.MultiprocessorCount),
		sharedCopyEngineCount:     C.uint(m.CIInfo.SharedCopyEngineCount),
		sharedDecoderCount:        C.uint(m.CIInfo.SharedDecoderCount),
		sharedEncoderCount:        C.uint(m.CIInfo.SharedEncoderCount),
		sharedJpegCount:           C.uint(m.CIInfo.SharedJpegCount),
		sharedOfaCount:            C.uint(m.CIInfo.SharedOfaCount),
		gpuInstanceSliceCount:     C.uint(m.GIInfo.SliceCount),
		computeInstanceSliceCount: C.uint(m.CIInfo.SliceCount),
		memorySizeMB:              C.ulonglong(m.GIInfo.MemorySizeMB),
	}
	return success
}

//export nvmlDeviceGetAttributes
func nvmlDeviceGetAttributes(h C.nvmlDevice_t, a *C.nvmlDeviceAttributes_t) C.nvmlReturn_t {
	return nvmlDeviceGetAttributes_v2(h, a)
}

func giProfile(h C.nvmlDevice_t, profile C.uint) (nvml.GpuInstanceProfileInfo, C.nvmlReturn_t) {
	d, ok := gpu(h)
	if !ok {
		return nvml.GpuInstanceProfileInfo{}, invalidArgument
	}
	info, ret := d.GetGpuInstanceProfileInfo(int(profile))
	return info, C.nvmlReturn_t(ret)
}

//export nvmlDeviceGetGpuInstanceProfileInfo
func nvmlDeviceGetGpuInstanceProfileInfo(h C.nvmlDevice_t, profile C.uint, out *C.nvmlGpuInstanceProfileInfo_t) C.nvmlReturn_t {
	info, ret := giProfile(h, profile)
	if ret != success || out == nil {
		return ret
	}
	*out = C.nvmlGpuInstanceProfileInfo_t{
		id: C.uint(info.Id), isP2pSupported: C.uint(info.IsP2pSupported), sliceCount: C.uint(info.SliceCount),
		instanceCount: C.uint(info.InstanceCount), multiprocessorCount: C.uint(info.MultiprocessorCount),
		copyEngineCount: C.uint(info.CopyEngineCount), decoderCount: C.uint(info.DecoderCount),
		encoderCount: C.uint(info.EncoderCount), jpegCount: C.uint(info.JpegCount),
		ofaCount: C.uint(info.OfaCount), memorySizeMB: C.ulonglong(info.MemorySizeMB),
	}
	return success
}

//export nvmlDeviceGetGpuInstanceProfileInfoV
func nvmlDeviceGetGpuInstanceProfileInfoV(h C.nvmlDevice_t, profile C.uint, out *C.nvmlGpuInstanceProfileInfo_v2_t) C.nvmlReturn_t {
	info, ret := giProfile(h, profile)
	if ret != success || out == nil {
		return ret
	}
	*out = C.nvmlGpuInstanceProfileInfo_v2_t{
		version: out.version,
		id:      C.uint(info.Id), isP2pSupported: C.uint(info.IsP2pSupported), sliceCount: C.uint(info.SliceCount),
		instanceCount: C.uint(info.InstanceCount), multiprocessorCount: C.uint(info.MultiprocessorCount),
		copyEngineCount: C.uint(info.CopyEngineCount), decoderCount: C.uint(info.DecoderCount),
		encoderCount: C.uint(info.EncoderCount), jpegCount: C.uint(info.JpegCount),
		ofaCount: C.uint(info.OfaCount), memorySizeMB: C.ulonglong(info.MemorySizeMB),
	}
	return success
}

//export nvmlDeviceGetGpuInstanceById
func nvmlDeviceGetGpuInstanceById(h C.nvmlDevice_t, id C.uint, out *C.nvmlGpuInstance_t) C.nvmlReturn_t {
	d, ok := gpu(h)
	if !ok || out == nil {
		return invalidArgument
	}
	state.Lock()
	defer state.Unlock()
	for _, m := range state.machine.Migs[d] {
		if m.GI.Info.Id == uint32(id) {
			*out = C.nvmlGpuInstance_t(handle(m.GI))
			return success
		}
	}
	return notFound
}

func gpuInstance(h C.nvmlGpuInstance_t) (*server.GpuInstance, bool) {
	state.Lock()
	defer state.Unlock()
	return lookup[*server.GpuInstance](unsafe.Pointer(h))
}

//export nvmlGpuInstanceGetInfo
func nvmlGpuInstanceGetInfo(h C.nvmlGpuInstance_t, out *C.nvmlGpuInstanceInfo_t) C.nvmlReturn_t {
	gi, ok := gpuInstance(h)
	if !ok || out == nil {
		return invalidArgument
	}
	state.Lock()
	defer state.Unlock()
	*out = C.nvmlGpuInstanceInfo_t{
		device:    C.nvmlDevice_t(handle(gi.Info.Device.(*server.Device))),
		id:        C.uint(gi.Info.Id),
		profileId: C.uint(gi.Info.ProfileId),
		placement: C.nvmlPlacement_t{start: C.uint(gi.Info.Placement.Start), size: C.uint(gi.Info.Placement.Size)},
	}
	return success
}

func ciProfile(h C.nvmlGpuInstance_t, profile, engine C.uint) (nvml.ComputeInstanceProfileInfo, C.nvmlReturn_t) {
	gi, ok := gpuInstance(h)
	if !ok {
		return nvml.ComputeInstanceProfileInfo{}, invalidArgument
	}
	info, ret := gi.GetComputeInstanceProfileInfo(int(profile), int(engine))
	return info, C.nvmlReturn_t(ret)
}

//export nvmlGpuInstanceGetComputeInstanceProfileInfo
func nvmlGpuInstanceGetComputeInstanceProfileInfo(h C.nvmlGpuInstance_t, profile, engine C.uint, out *C.nvmlComputeInstanceProfileInfo_t) C.nvmlReturn_t {
	info, ret := ciProfile(h, profile, engine)
	if ret != success || out == nil {
		return ret
	}
	*out = C.nvmlComputeInstanceProfileInfo_t{
		id: C.uint(info.Id), sliceCount: C.uint(info.SliceCount), instanceCount: C.uint(info.InstanceCount),
		multiprocessorCount: C.uint(info.MultiprocessorCount), sharedCopyEngineCount: C.uint(info.SharedCopyEngineCount),
		sharedDecoderCount: C.uint(info.SharedDecoderCount), sharedEncoderCount: C.uint(info.SharedEncoderCount),
		sharedJpegCount: C.uint(info.SharedJpegCount), sharedOfaCount: C.uint(info.SharedOfaCount),
	}
	return success
}

//export nvmlGpuInstanceGetComputeInstanceProfileInfoV
func nvmlGpuInstanceGetComputeInstanceProfileInfoV(h C.nvmlGpuInstance_t, profile, engine C.uint, out *C.nvmlComputeInstanceProfileInfo_v2_t) C.nvmlReturn_t {
	info, ret := ciProfile(h, profile, engine)
	if ret != success || out == nil {
		return ret
	}
	*out = C.nvmlComputeInstanceProfileInfo_v2_t{
		version: out.version,
		id:      C.uint(info.Id), sliceCount: C.uint(info.SliceCount), instanceCount: C.uint(info.InstanceCount),
		multiprocessorCount: C.uint(info.MultiprocessorCount), sharedCopyEngineCount: C.uint(info.SharedCopyEngineCount),
		sharedDecoderCount: C.uint(info.SharedDecoderCount), sharedEncoderCount: C.uint(info.SharedEncoderCount),
		sharedJpegCount: C.uint(info.SharedJpegCount), sharedOfaCount: C.uint(info.SharedOfaCount),
	}
	return success
}

//export nvmlGpuInstanceGetComputeInstanceById
func nvmlGpuInstanceGetComputeInstanceById(h C.nvmlGpuInstance_t, id C.uint, out *C.nvmlComputeInstance_t) C.nvmlReturn_t {
	gi, ok := gpuInstance(h)
	if !ok || out == nil {
		return invalidArgument
	}
	gi.RLock()
	defer gi.RUnlock()
	for ci := range gi.ComputeInstances {
		if ci.Info.Id == uint32(id) {
			state.Lock()
			defer state.Unlock()
			*out = C.nvmlComputeInstance_t(handle(ci))
			return success
		}
	}
	return notFound
}

//export nvmlComputeInstanceGetInfo_v2
func nvmlComputeInstanceGetInfo_v2(h C.nvmlComputeInstance_t, out *C.nvmlComputeInstanceInfo_t) C.nvmlReturn_t {
	state.Lock()
	defer state.Unlock()
	ci, ok := lookup[*server.ComputeInstance](unsafe.Pointer(h))
	if !ok || out == nil {
		return invalidArgument
	}
	*out = C.nvmlComputeInstanceInfo_t{
		device:      C.nvmlDevice_t(handle(ci.Info.Device.(*server.Device))),
		gpuInstance: C.nvmlGpuInstance_t(handle(ci.Info.GpuInstance.(*server.GpuInstance))),
		id:          C.uint(ci.Info.Id),
		profileId:   C.uint(ci.Info.ProfileId),
		placement:   C.nvmlPlacement_t{start: C.uint(ci.Info.Placement.Start), size: C.uint(ci.Info.Placement.Size)},
	}
	return success
}

//export nvmlComputeInstanceGetInfo
func nvmlComputeInstanceGetInfo(h C.nvmlComputeInstance_t, out *C.nvmlComputeInstanceInfo_t) C.nvmlReturn_t {
	return nvmlComputeInstanceGetInfo_v2(h, out)
}

// ---- fabric: none unless MOCK_NVML_FABRIC gives one ----

func fabric(h C.nvmlDevice_t) (nvml.GpuFabricInfo, C.nvmlReturn_t) {
	d, ok := gpu(h)
	if !ok {
		return nvml.GpuFabricInfo{}, invalidArgument
	}
	if len(state.machine.Fabric) == 0 {
		return nvml.GpuFabricInfo{}, notSupported
	}
	return state.machine.Fabric[d.Index], success
}

//export nvmlDeviceGetGpuFabricInfo
func nvmlDeviceGetGpuFabricInfo(h C.nvmlDevice_t, out *C.nvmlGpuFabricInfo_t) C.nvmlReturn_t {
	info, ret := fabric(h)
	if ret != success || out == nil {
		return ret
	}
	*out = C.nvmlGpuFabricInfo_t{status: C.int(info.Status), cliqueId: C.uint(info.CliqueId), state: C.uchar(info.State)}
	C.memcpy(unsafe.Pointer(&out.clusterUuid[0]), unsafe.Pointer(&info.ClusterUuid[0]), 16)
	return success
}

// nvmlDeviceGetGpuFabricInfoV fills the fields every version has (v2 onwards: version, health mask).
//
//export nvmlDeviceGetGpuFabricInfoV
func nvmlDeviceGetGpuFabricInfoV(h C.nvmlDevice_t, out *C.nvmlGpuFabricInfo_v2_t) C.nvmlReturn_t {
	info, ret := fabric(h)
	if ret != success || out == nil {
		return ret
	}
	*out = C.nvmlGpuFabricInfo_v2_t{
		version: out.version, status: C.int(info.Status), cliqueId: C.uint(info.CliqueId), state: C.uchar(info.State),
	}
	C.memcpy(unsafe.Pointer(&out.clusterUuid[0]), unsafe.Pointer(&info.ClusterUuid[0]), 16)
	return success
}

func main() {}
