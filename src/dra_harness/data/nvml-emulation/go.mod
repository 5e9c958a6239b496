// The emulated NVML library (libnvidia-ml.so.1) built by `dra_harness.components.nvml`.
module dra-harness/nvml-emulation

go 1.26.0

require github.com/NVIDIA/go-nvml v0.13.3-1
