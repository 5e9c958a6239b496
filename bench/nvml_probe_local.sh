#!/usr/bin/env bash
# Run the NVML probe for real on this machine (any host with an NVIDIA GPU and driver, or none)
# and keep its raw output as a fixture: fixtures/nvml/real-<host>-<date>.log.
#
#   bench/nvml_probe_local.sh            # uses .venv (nvidia-ml-py is a harness dependency)
#   PYTHON=python3 bench/nvml_probe_local.sh
#
# The unit tests parse every fixtures/nvml/*.log, so a new recording is checked at once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
out="fixtures/nvml/real-$(hostname -s | tr -c 'a-zA-Z0-9\n-' '-')-$(date -u +%Y%m%d).log"
NODE_NAME="${NODE_NAME:-$(hostname -s)}" POD_NAME="${POD_NAME:-host}" "$PYTHON" src/dra_harness/nvml_probe_script.py | tee "$out"
if command -v nvidia-smi >/dev/null 2>&1; then
  # What the driver's own tool says, next to the probe, for a reviewer to compare.
  nvidia-smi -L | sed 's/^/# nvidia-smi -L: /' >> "$out" || true
fi
"$PYTHON" - "$out" <<'PY'
import sys
from dra_harness.nvml_probe import parse
r = parse(open(sys.argv[1]).read())
print(f"kept {sys.argv[1]}: " + (f"NVML error: {r.error}" if r.error else f"{len(r.gpus)} GPU(s): " + ", ".join(
    f"{g.uuid} pci={g.pci_bus_id} mig={'on' if g.mig_enabled else 'off'} mode={g.compute_mode} procs={g.processes}" for g in r.gpus)))
PY
