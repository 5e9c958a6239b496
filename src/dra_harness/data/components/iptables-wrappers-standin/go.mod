// A stand-in for sigs.k8s.io/iptables-wrappers, which the Go module proxy does not serve (403, Dec 2026).
// Kubernetes v1.38's kubelet imports its iptables package only to create the KUBE-IPTABLES-HINT and
// KUBE-FIREWALL chains for other components; with no iptables client it logs "No iptables support on this
// system" and goes on, as on an nftables-only host. This module gives the API the kubelet compiles against
// and finds no iptables: the embedded cluster's real node runs no kube-proxy that would read those chains.
module sigs.k8s.io/iptables-wrappers

go 1.24
