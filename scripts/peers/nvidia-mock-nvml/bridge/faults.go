package main

// GPU faults, injected through the same file as Xid events (MOCK_NVML_EVENTS), so that a test can make a
// GPU fail while programs hold the library open: a line "<gpu index> lost" makes every call on that GPU
// answer NVML_ERROR_GPU_IS_LOST (a GPU fallen off the bus), "<gpu index> unknown-error" NVML_ERROR_UNKNOWN,
// and "<gpu index> answers" lifts the fault, as a reset does. The last such line for a GPU is in force;
// Xid lines ("<gpu index> <xid>") are left to the event sets.

/*
typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
*/
import "C"

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

var faultCodes = map[string]C.nvmlReturn_t{
	"lost":          C.nvmlReturn_t(nvml.ERROR_GPU_IS_LOST),
	"unknown-error": C.nvmlReturn_t(nvml.ERROR_UNKNOWN),
	"answers":       success,
}

// faultOf is what GPU index answers instead of its facts; success when nothing is in force.
func faultOf(index int) C.nvmlReturn_t {
	f, err := os.Open(cgetenv("MOCK_NVML_EVENTS"))
	if err != nil {
		return success
	}
	defer f.Close()
	code := success
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) != 2 {
			continue
		}
		i, err := strconv.Atoi(fields[0])
		fault, known := faultCodes[fields[1]]
		if err == nil && known && i == index {
			code = fault
		}
	}
	return code
}

// faulted is the fault in force for the GPU behind handle h (itself, or the parent of a MIG device).
func faulted(h C.nvmlDevice_t) C.nvmlReturn_t {
	if d, ok := gpu(h); ok {
		return faultOf(d.Index)
	}
	if m, ok := mig(h); ok {
		return faultOf(m.Parent.Index)
	}
	return success
}
