#!/usr/bin/env bash
# The anchor of bench/restart-soak.sh: torchrun's own restart of an equivalent PyTorch job on CPU
# (torchrun_restart.py beside this script: 2 processes, gloo, DDP MLP, a checkpoint every 4 steps,
# kill -9 of a random rank at a random step, --max-restarts 1). Needs a Python with torch (no network:
# on the lent machines /opt/*/.venv/bin/python has it). Writes the CSV and the summary to $OUT (or
# bench/results) as <date>-torchrun-restart.csv and .txt.
#
#   bench/fault-soak/torchrun-restart.sh [torchrun_restart.py flags, e.g. --trials 100 --minutes 20]
#   PYTHON=/opt/venv/bin/python bench/fault-soak/torchrun-restart.sh --trials 20
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-}
if [ -z "$py" ]; then
  for c in /opt/*/.venv/bin/python /opt/*/bin/python python3; do
    if [ -x "$(command -v "$c" 2>/dev/null || true)" ] && "$c" -c 'import torch' 2>/dev/null; then
      py=$c
      break
    fi
  done
fi
if [ -z "$py" ]; then
  echo "no Python with torch found: set PYTHON=/path/to/python" >&2
  exit 2
fi
out=${OUT:-$here/../results}
mkdir -p "$out"
base="$out/$(date -u +%Y-%m-%d)-torchrun-restart"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); python: $py ($("$py" -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'))"
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(cat /proc/loadavg)"
  echo "command: bench/fault-soak/torchrun-restart.sh $*"
} > "$base.txt"
"$py" "$here/torchrun_restart.py" --python "$py" --csv "$base.csv" "$@" 2> >(tee -a "$base.txt" >&2)
echo "wrote $base.csv and $base.txt" >&2
