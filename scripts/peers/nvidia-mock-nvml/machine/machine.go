// Package machine builds the simulated machine that the mock NVML library serves, from NVIDIA's own mock
// servers in go-nvml (pkg/nvml/mock): the GPU models, their memory and MIG profiles are NVIDIA's data.
// What go-nvml leaves random or unset is made deterministic here, so that two processes (NVIDIA's GFD and
// ours) that load the library one after the other see the same machine.
//
// Environment:
//
//	MOCK_NVML_MACHINE  dgxa100 (default), dgxh100, dgxh200, dgxb200, a100-pcie-80gb, a30
//	MOCK_NVML_MIG      comma-separated GPU instance profile ids (nvml.GPU_INSTANCE_PROFILE_*) to create on
//	                   each MIG GPU, each with one compute instance spanning it; "enabled" turns MIG on with
//	                   no instances; unset: MIG off
//	MOCK_NVML_MIG_GPUS comma-separated GPU indices that get MIG (default: all)
//	MOCK_NVML_NUM_DEVICES keep only the first N GPUs of the machine
//	MOCK_NVML_VISIBLE_DEVICES the GPUs a container was given (UUIDs or indices, comma-separated; "all"),
//	                   as the container toolkit exposes them; the others are not enumerated
//	MOCK_NVML_EVENTS   a file of injected Xid events, one "<gpu index> <xid>" line each (bridge/events.go),
//	                   and of GPU faults, "<gpu index> lost|unknown-error|answers" (bridge/faults.go)
//	MOCK_NVML_VIRTUALIZATION_MODE none (default: bare metal), passthrough, vgpu (a vGPU guest), host-vgpu
//	MOCK_NVML_FABRIC   the NVLink fabric: "<clusterUUID>.<cliqueId>" for every GPU, or a comma-separated
//	                   list, one per GPU (the last one repeats); unset: no fabric (Not Supported)
//	MOCK_NVML_FABRIC_STATE the fabric registration state (nvmlGpuFabricState_t, default 3: completed)
//	MOCK_NVML_INIT_LOG a file the library appends a line to on every nvmlInit (read by the bridge)
package machine

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Names lists the machines this library can simulate.
var Names = []string{"dgxa100", "dgxh100", "dgxh200", "dgxb200", "a100-pcie-80gb", "a30"}

// Mig is one MIG device: a GPU instance and the compute instance spanning it.
type Mig struct {
	Parent   *server.Device
	GI       *server.GpuInstance
	CI       *server.ComputeInstance
	GIInfo   nvml.GpuInstanceProfileInfo
	CIInfo   nvml.ComputeInstanceProfileInfo
	UUID     string
	Position int
}

// Machine is the simulated node.
type Machine struct {
	Name string
	// VirtualizationMode is every GPU's nvmlGpuVirtualizationMode_t.
	VirtualizationMode nvml.GpuVirtualizationMode
	// Fabric is each GPU's NVLink fabric registration; empty: no fabric.
	Fabric  []nvml.GpuFabricInfo
	Server  *server.Server
	Devices []*server.Device
	Migs    map[*server.Device][]*Mig
}

func newServer(name string) (*server.Server, error) {
	switch name {
	case "dgxa100":
		return dgxa100.New(), nil
	case "dgxh100":
		return dgxh100.New(), nil
	case "dgxh200":
		return dgxh200.New(), nil
	case "dgxb200":
		return dgxb200.New(), nil
	case "a100-pcie-80gb":
		return dgxa100.NewWithGPUs(gpus.Multiple(2, gpus.A100_PCIE_80GB)...), nil
	case "a30":
		return dgxa100.NewWithGPUs(gpus.Multiple(4, gpus.A30_PCIE_24GB)...), nil
	}
	return nil, fmt.Errorf("MOCK_NVML_MACHINE=%q: not one of %s", name, strings.Join(Names, ", "))
}

// FromEnv builds the machine the environment asks for.
func FromEnv() (*Machine, error) { return FromLookup(os.Getenv) }

// FromLookup builds the machine that getenv's variables ask for.
func FromLookup(getenv func(string) string) (*Machine, error) {
	name := getenv("MOCK_NVML_MACHINE")
	if name == "" {
		name = "dgxa100"
	}
	m, err := Build(name, getenv("MOCK_NVML_MIG"), getenv("MOCK_NVML_MIG_GPUS"))
	if err != nil {
		return nil, err
	}
	modes := map[string]nvml.GpuVirtualizationMode{
		"": nvml.GPU_VIRTUALIZATION_MODE_NONE, "none": nvml.GPU_VIRTUALIZATION_MODE_NONE,
		"passthrough": nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH, "vgpu": nvml.GPU_VIRTUALIZATION_MODE_VGPU,
		"host-vgpu": nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU,
	}
	mode, ok := modes[getenv("MOCK_NVML_VIRTUALIZATION_MODE")]
	if !ok {
		return nil, fmt.Errorf("MOCK_NVML_VIRTUALIZATION_MODE=%q: not none, passthrough, vgpu or host-vgpu", getenv("MOCK_NVML_VIRTUALIZATION_MODE"))
	}
	m.VirtualizationMode = mode
	if err := m.setFabric(getenv("MOCK_NVML_FABRIC"), getenv("MOCK_NVML_FABRIC_STATE")); err != nil {
		return nil, err
	}
	if getenv("MOCK_NVML_NUM_DEVICES") != "" {
		n, err := strconv.Atoi(getenv("MOCK_NVML_NUM_DEVICES"))
		if err != nil || n < 0 || n > len(m.Devices) {
			return nil, fmt.Errorf("MOCK_NVML_NUM_DEVICES=%q: not a number of GPUs up to %d", getenv("MOCK_NVML_NUM_DEVICES"), len(m.Devices))
		}
		m.Devices = m.Devices[:n]
		m.Server.Devices = m.Server.Devices[:n]
	}
	return m, m.keepVisible(getenv("MOCK_NVML_VISIBLE_DEVICES"))
}

// keepVisible keeps the GPUs a container was given ("all", or GPU UUIDs and indices, comma-separated, as
// in NVIDIA_VISIBLE_DEVICES), numbered from 0 in that order, as NVML inside such a container sees them.
func (m *Machine) keepVisible(visible string) error {
	if visible == "" || visible == "all" {
		return nil
	}
	var kept []*server.Device
	for _, want := range strings.Split(visible, ",") {
		want = strings.TrimSpace(want)
		found := false
		for i, d := range m.Devices {
			if d.UUID == want || strconv.Itoa(i) == want {
				kept, found = append(kept, d), true
				break
			}
		}
		if !found {
			return fmt.Errorf("MOCK_NVML_VISIBLE_DEVICES=%q: no GPU %q on this machine", visible, want)
		}
	}
	m.Devices = kept
	m.Server.Devices = m.Server.Devices[:0]
	for i, d := range kept {
		d.Index = i
		m.Server.Devices = append(m.Server.Devices, d)
	}
	return nil
}

// Build builds a machine with the given MIG layout.
func Build(name, mig, migGPUs string) (*Machine, error) {
	s, err := newServer(name)
	if err != nil {
		return nil, err
	}
	m := &Machine{Name: name, Server: s, Migs: map[*server.Device][]*Mig{}}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		// Stable identities instead of go-nvml's random ones; NVML spells bus ids with 8 domain digits.
		dev.UUID = fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", i, 0x100+i)
		dev.PciBusID = fmt.Sprintf("00000000:%02X:00.0", 0x10+i)
		m.Devices = append(m.Devices, dev)
	}
	if mig == "" {
		return m, nil
	}
	selected, err := parseIndices(migGPUs, len(m.Devices))
	if err != nil {
		return nil, err
	}
	var profiles []int
	if mig != "enabled" {
		for _, f := range strings.Split(mig, ",") {
			p, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, fmt.Errorf("MOCK_NVML_MIG=%q: %q is not a profile id", mig, f)
			}
			profiles = append(profiles, p)
		}
	}
	for _, i := range selected {
		dev := m.Devices[i]
		if len(dev.Config.MIGProfiles.GpuInstanceProfiles) == 0 {
			continue // not MIG capable
		}
		dev.MigMode = nvml.DEVICE_MIG_ENABLE
		for _, p := range profiles {
			mg, err := createMig(dev, p)
			if err != nil {
				return nil, fmt.Errorf("GPU %d: %w", i, err)
			}
			mg.Position = len(m.Migs[dev])
			mg.UUID = fmt.Sprintf("MIG-%08x-%04x-4000-8000-%012x", i, mg.Position, 0x200+i)
			m.Migs[dev] = append(m.Migs[dev], mg)
		}
	}
	return m, nil
}

func createMig(dev *server.Device, profile int) (*Mig, error) {
	giInfo, ret := dev.GetGpuInstanceProfileInfo(profile)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU instance profile %d: %v", profile, ret)
	}
	gi, ret := dev.CreateGpuInstance(&giInfo)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("creating GPU instance %d: %v", profile, ret)
	}
	sgi := gi.(*server.GpuInstance)
	// The compute instance spanning the whole GPU instance: the profile with the most slices.
	cis := dev.Config.MIGProfiles.ComputeInstanceProfiles[int(giInfo.Id)]
	ids := make([]int, 0, len(cis))
	for id := range cis {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	best := -1
	for _, id := range ids {
		if best < 0 || cis[id].SliceCount > cis[best].SliceCount {
			best = id
		}
	}
	if best < 0 {
		return nil, fmt.Errorf("GPU instance profile %d has no compute instance profile", profile)
	}
	ciInfo := cis[best]
	ci, ret := sgi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("creating compute instance: %v", ret)
	}
	return &Mig{Parent: dev, GI: sgi, CI: ci.(*server.ComputeInstance), GIInfo: giInfo, CIInfo: ciInfo}, nil
}

func parseIndices(s string, n int) ([]int, error) {
	var out []int
	if s == "" {
		for i := 0; i < n; i++ {
			out = append(out, i)
		}
		return out, nil
	}
	for _, f := range strings.Split(s, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 0 || i >= n {
			return nil, fmt.Errorf("MOCK_NVML_MIG_GPUS=%q: %q is not a GPU index below %d", s, f, n)
		}
		out = append(out, i)
	}
	return out, nil
}

func (m *Machine) setFabric(spec, state string) error {
	if spec == "" {
		return nil
	}
	st := uint8(nvml.GPU_FABRIC_STATE_COMPLETED)
	if state != "" {
		n, err := strconv.ParseUint(state, 10, 8)
		if err != nil {
			return fmt.Errorf("MOCK_NVML_FABRIC_STATE=%q: not a fabric state number", state)
		}
		st = uint8(n)
	}
	entries := strings.Split(spec, ",")
	for i := range m.Devices {
		entry := entries[min(i, len(entries)-1)]
		cluster, clique, ok := strings.Cut(strings.TrimSpace(entry), ".")
		id, uerr := uuid.Parse(cluster)
		n, cerr := strconv.ParseUint(clique, 10, 32)
		if !ok || uerr != nil || cerr != nil {
			return fmt.Errorf("MOCK_NVML_FABRIC=%q: %q is not <clusterUUID>.<cliqueId>", spec, entry)
		}
		m.Fabric = append(m.Fabric, nvml.GpuFabricInfo{ClusterUuid: id, Status: uint32(nvml.SUCCESS), CliqueId: uint32(n), State: st})
	}
	return nil
}
