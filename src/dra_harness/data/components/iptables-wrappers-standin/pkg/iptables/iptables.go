// Package iptables is dra-harness's stand-in for sigs.k8s.io/iptables-wrappers/pkg/iptables: the types the
// kubelet names, and NewBestEffort finding no iptables on the host (see go.mod).
package iptables

import (
	"context"
	"errors"
	"time"
)

// Chain is an iptables chain name.
type Chain string

// Table is an iptables table name.
type Table string

// RulePosition says where EnsureRule puts a rule.
type RulePosition string

// Protocol is the IP family of a client.
type Protocol string

// Mode says which iptables binary a client uses.
type Mode string

const (
	TableNAT    Table = "nat"
	TableFilter Table = "filter"
	TableMangle Table = "mangle"

	ChainInput       Chain = "INPUT"
	ChainOutput      Chain = "OUTPUT"
	ChainForward     Chain = "FORWARD"
	ChainPrerouting  Chain = "PREROUTING"
	ChainPostrouting Chain = "POSTROUTING"

	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"

	ProtocolIPv4 Protocol = "IPv4"
	ProtocolIPv6 Protocol = "IPv6"

	UseInstalledMode Mode = "installed"
)

// ErrNoIPTables is what every call answers: the stand-in manages no iptables.
var ErrNoIPTables = errors.New("iptables: not available (dra-harness stand-in for sigs.k8s.io/iptables-wrappers)")

// Interface is the part of an iptables client the kubelet uses.
type Interface interface {
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	IsIPv6() bool
	Protocol() Protocol
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

// NewBestEffort returns a client per IP family that works on this host: none here.
func NewBestEffort(ctx context.Context, mode Mode) map[Protocol]Interface {
	return map[Protocol]Interface{}
}
