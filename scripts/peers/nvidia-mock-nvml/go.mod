// Test-only: the NVML C library over NVIDIA's go-nvml mock machines, which NVIDIA's gpu-feature-discovery
// and our gfd both load in the parity tests.
module gpu-labeller/peers/nvidia-mock-nvml

go 1.25.0

require github.com/NVIDIA/go-nvml v0.13.4-1

require github.com/google/uuid v1.6.0
