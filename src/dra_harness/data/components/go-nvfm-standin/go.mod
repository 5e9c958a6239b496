// A stand-in for github.com/NVIDIA/go-nvfm, which the Go module proxy does not serve (403, Dec 2026).
// NVIDIA's DRA driver v0.5.0 imports it for NVSwitch fabric partitions; it opens the fabric manager only
// when the host has a fabric (fabricmanager.HasFabricManagerFabric), which no machine here has. This
// module gives the API the driver compiles against and answers "library not found" to every call.
module github.com/NVIDIA/go-nvfm

go 1.24
