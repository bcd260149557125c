// Command describe prints, as JSON, the machine that the mock NVML library serves under the same
// environment (MOCK_NVML_*), straight from go-nvml's data: what the tests expect a probe to report.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"gpu-labeller/peers/nvidia-mock-nvml/machine"
)

type migJSON struct {
	UUID            string `json:"uuid"`
	GISlices        uint32 `json:"gi_slices"`
	CISlices        uint32 `json:"ci_slices"`
	MemoryMiB       uint64 `json:"memory_mib"`
	Multiprocessors uint32 `json:"multiprocessors"`
	CopyEngines     uint32 `json:"copy_engines"`
	Decoders        uint32 `json:"decoders"`
	Encoders        uint32 `json:"encoders"`
	Jpegs           uint32 `json:"jpegs"`
	Ofas            uint32 `json:"ofas"`
}

type deviceJSON struct {
	Index             int       `json:"index"`
	Name              string    `json:"name"`
	UUID              string    `json:"uuid"`
	MemoryMiB         uint64    `json:"memory_mib"`
	ComputeCapability [2]int    `json:"compute_capability"`
	PciBusID          string    `json:"pci_bus_id"`
	MigCapable        bool      `json:"mig_capable"`
	MigEnabled        bool      `json:"mig_enabled"`
	Migs              []migJSON `json:"migs"`
}

type machineJSON struct {
	Name               string       `json:"name"`
	VirtualizationMode int          `json:"virtualization_mode"`
	DriverVersion      string       `json:"driver_version"`
	CudaDriverVersion  int          `json:"cuda_driver_version"`
	Devices            []deviceJSON `json:"devices"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--list" {
		_ = json.NewEncoder(os.Stdout).Encode(machine.Names)
		return
	}
	m, err := machine.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "describe:", err)
		os.Exit(2)
	}
	out := machineJSON{
		Name:               m.Name,
		VirtualizationMode: int(m.VirtualizationMode),
		DriverVersion:      m.Server.DriverVersion,
		CudaDriverVersion:  m.Server.CudaDriverVersion,
	}
	for _, d := range m.Devices {
		dj := deviceJSON{
			Index:             d.Index,
			Name:              d.Config.Name,
			UUID:              d.UUID,
			MemoryMiB:         d.MemoryInfo.Total / (1024 * 1024),
			ComputeCapability: [2]int{d.Config.CudaMajor, d.Config.CudaMinor},
			PciBusID:          d.PciBusID,
			MigCapable:        len(d.Config.MIGProfiles.GpuInstanceProfiles) > 0,
			MigEnabled:        d.MigMode == 1,
			Migs:              []migJSON{},
		}
		for _, g := range m.Migs[d] {
			dj.Migs = append(dj.Migs, migJSON{
				UUID: g.UUID, GISlices: g.GIInfo.SliceCount, CISlices: g.CIInfo.SliceCount,
				MemoryMiB: g.GIInfo.MemorySizeMB, Multiprocessors: g.CIInfo.MultiprocessorCount,
				CopyEngines: g.CIInfo.SharedCopyEngineCount, Decoders: g.CIInfo.SharedDecoderCount,
				Encoders: g.CIInfo.SharedEncoderCount, Jpegs: g.CIInfo.SharedJpegCount, Ofas: g.CIInfo.SharedOfaCount,
			})
		}
		out.Devices = append(out.Devices, dj)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}
