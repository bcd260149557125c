package main

// What NVIDIA's k8s-device-plugin calls beyond labelling: look-up by UUID, the event set of its health
// check, and the topology/NVLink queries of its preferred-allocation policy (go-gpuallocator). With these
// it runs unmodified over the mock machine: no DP_DISABLE_HEALTHCHECKS, no preload shim.
//
// The machine is a plain PCIe box for those queries: every pair of GPUs meets at the system level
// (NVML_TOPOLOGY_SYSTEM) and no NVLink is reported (Not Supported), whatever go-nvml's mock says of the
// DGX it models; the device plugin then falls back to its simple allocation policy.
//
// Events are injected, as a driver's Xid reports would arrive, through a file named by MOCK_NVML_EVENTS:
// one line per event, "<gpu index> <xid>", appended at any time. A waiting nvmlEventSetWait returns each
// new line once, to each event set that registered that GPU for critical Xid events.

/*
#include <stdlib.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef void *nvmlEventSet_t;
typedef struct {
	nvmlDevice_t device;
	unsigned long long eventType, eventData;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
*/
import "C"

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

const (
	timeout        = C.nvmlReturn_t(nvml.ERROR_TIMEOUT)
	topologySystem = C.int(nvml.TOPOLOGY_SYSTEM)
	// The events a healthy GPU of this machine supports: the ones the device plugin asks for.
	supportedEvents = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError |
		nvml.EventTypeSingleBitEccError)
	noInstance = 0xFFFFFFFF
)

// eventSet is what an nvmlEventSet_t stands for: the GPUs registered and how far the event file was read.
type eventSet struct {
	masks  map[*server.Device]uint64
	offset int64
}

//export nvmlDeviceGetHandleByUUID
func nvmlDeviceGetHandleByUUID(uuid *C.char, dev *C.nvmlDevice_t) C.nvmlReturn_t {
	if !ready() {
		return uninitialized
	}
	if uuid == nil || dev == nil {
		return invalidArgument
	}
	want := C.GoString(uuid)
	state.Lock()
	defer state.Unlock()
	for _, d := range state.machine.Devices {
		if d.UUID == want {
			*dev = C.nvmlDevice_t(handle(d))
			return success
		}
		for _, m := range state.machine.Migs[d] {
			if m.UUID == want {
				*dev = C.nvmlDevice_t(handle(m))
				return success
			}
		}
	}
	return notFound
}

//export nvmlEventSetCreate
func nvmlEventSetCreate(set *C.nvmlEventSet_t) C.nvmlReturn_t {
	if !ready() {
		return uninitialized
	}
	if set == nil {
		return invalidArgument
	}
	state.Lock()
	defer state.Unlock()
	// Events written before the set existed are history, not news.
	var offset int64
	if info, err := os.Stat(cgetenv("MOCK_NVML_EVENTS")); err == nil {
		offset = info.Size()
	}
	*set = C.nvmlEventSet_t(handle(&eventSet{masks: map[*server.Device]uint64{}, offset: offset}))
	return success
}

//export nvmlEventSetFree
func nvmlEventSetFree(set C.nvmlEventSet_t) C.nvmlReturn_t {
	state.Lock()
	defer state.Unlock()
	s, ok := lookup[*eventSet](unsafe.Pointer(set))
	if !ok {
		return invalidArgument
	}
	delete(state.handles, s)
	delete(state.objects, unsafe.Pointer(set))
	C.free(unsafe.Pointer(set))
	return success
}

//export nvmlDeviceGetSupportedEventTypes
func nvmlDeviceGetSupportedEventTypes(h C.nvmlDevice_t, types *C.ulonglong) C.nvmlReturn_t {
	if _, ok := gpu(h); !ok || types == nil {
		return invalidArgument
	}
	*types = C.ulonglong(supportedEvents)
	return success
}

//export nvmlDeviceRegisterEvents
func nvmlDeviceRegisterEvents(h C.nvmlDevice_t, types C.ulonglong, set C.nvmlEventSet_t) C.nvmlReturn_t {
	d, ok := gpu(h)
	if !ok {
		return invalidArgument
	}
	if uint64(types)&^supportedEvents != 0 {
		return notSupported
	}
	state.Lock()
	defer state.Unlock()
	s, ok := lookup[*eventSet](unsafe.Pointer(set))
	if !ok {
		return invalidArgument
	}
	s.masks[d] |= uint64(types)
	return success
}

// nextEvent reads the event file past the set's offset and returns the first event for a GPU the set
// registered for critical Xids; lines for other GPUs are consumed.
func nextEvent(s *eventSet) (*server.Device, uint64, bool) {
	f, err := os.Open(cgetenv("MOCK_NVML_EVENTS"))
	if err != nil {
		return nil, 0, false
	}
	defer f.Close()
	if _, err := f.Seek(s.offset, 0); err != nil {
		return nil, 0, false
	}
	reader := bufio.NewReader(f)
	for {
		line, err := reader.ReadString('\n')
		if err != nil { // an unfinished last line is read once it is finished
			return nil, 0, false
		}
		s.offset += int64(len(line))
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		index, err1 := strconv.Atoi(fields[0])
		xid, err2 := strconv.ParseUint(fields[1], 10, 64)
		if err1 != nil || err2 != nil || index < 0 || index >= len(state.machine.Devices) {
			continue
		}
		d := state.machine.Devices[index]
		if s.masks[d]&uint64(nvml.EventTypeXidCriticalError) != 0 {
			return d, xid, true
		}
	}
}

//export nvmlEventSetWait_v2
func nvmlEventSetWait_v2(set C.nvmlEventSet_t, data *C.nvmlEventData_t, timeoutms C.uint) C.nvmlReturn_t {
	if !ready() {
		return uninitialized
	}
	if data == nil {
		return invalidArgument
	}
	deadline := time.Now().Add(time.Duration(timeoutms) * time.Millisecond)
	if cgetenv("MOCK_NVML_EVENTS") == "" {
		// No events file, so no event can come: wait out the timeout in one sleep, as a real driver
		// blocks, rather than polling (which would bill the caller's process for the mock's work).
		time.Sleep(time.Until(deadline))
		return timeout
	}
	for {
		state.Lock()
		s, ok := lookup[*eventSet](unsafe.Pointer(set))
		if !ok {
			state.Unlock()
			return invalidArgument
		}
		d, xid, found := nextEvent(s)
		if found {
			data.device = C.nvmlDevice_t(handle(d))
			data.eventType = C.ulonglong(nvml.EventTypeXidCriticalError)
			data.eventData = C.ulonglong(xid)
			data.gpuInstanceId, data.computeInstanceId = noInstance, noInstance
		}
		state.Unlock()
		if found {
			return success
		}
		if !time.Now().Before(deadline) {
			return timeout
		}
		time.Sleep(min(100*time.Millisecond, time.Until(deadline)))
	}
}

//export nvmlEventSetWait
func nvmlEventSetWait(set C.nvmlEventSet_t, data *C.nvmlEventData_t, timeoutms C.uint) C.nvmlReturn_t {
	return nvmlEventSetWait_v2(set, data, timeoutms)
}

//export nvmlDeviceGetTopologyCommonAncestor
func nvmlDeviceGetTopologyCommonAncestor(a, b C.nvmlDevice_t, level *C.int) C.nvmlReturn_t {
	_, okA := gpu(a)
	_, okB := gpu(b)
	if !okA || !okB || level == nil {
		return invalidArgument
	}
	*level = topologySystem
	return success
}

//export nvmlDeviceGetNvLinkState
func nvmlDeviceGetNvLinkState(h C.nvmlDevice_t, link C.uint, active *C.int) C.nvmlReturn_t {
	if _, ok := gpu(h); !ok || active == nil {
		return invalidArgument
	}
	return notSupported
}

//export nvmlDeviceGetNvLinkRemotePciInfo_v2
func nvmlDeviceGetNvLinkRemotePciInfo_v2(h C.nvmlDevice_t, link C.uint, pci unsafe.Pointer) C.nvmlReturn_t {
	if _, ok := gpu(h); !ok || pci == nil {
		return invalidArgument
	}
	return notSupported
}

//export nvmlDeviceGetNvLinkRemotePciInfo
func nvmlDeviceGetNvLinkRemotePciInfo(h C.nvmlDevice_t, link C.uint, pci unsafe.Pointer) C.nvmlReturn_t {
	return nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link, pci)
}
