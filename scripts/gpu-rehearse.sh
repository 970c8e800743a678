#!/usr/bin/env bash
# The whole GPU path on this CPU machine: make the bundle, copy it into a clean
# folder as the device tool would carry it, run gpu-run.sh there with torch's lib
# on LD_LIBRARY_PATH exactly as on the GPU machine (DEVICES=cpu), and check that
# the tarball holds a report, the runs and the charts.
#
# usage: scripts/gpu-rehearse.sh      env: PYTHON (default .venv/bin/python3), BIN, DATA
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$PWD/.venv/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash scripts/gpu-bundle.sh "$tmp/bundle"
mkdir -p "$tmp/gpu"
cp -r "$tmp/bundle/." "$tmp/gpu/"
start=$(date +%s)
(cd "$tmp/gpu" && OUT="$tmp/out" PYTHON="$PYTHON" DEVICES=cpu bash scripts/gpu-run.sh ablations/gpu-smoke.toml)
listing=$(tar tzf "$tmp/out/results.tar.gz")
for want in runs.parquet manifest.json report-dawn.md report-airbench.md report.csv ladder.png doctor.txt run.log; do
  grep -q "$want" <<< "$listing" || { echo "error: results.tar.gz has no $want" >&2; exit 1; }
done
tar xzf "$tmp/out/results.tar.gz" -C "$tmp"
grep -q "cifar10-jpeg" "$(ls "$tmp"/results/gpu-smoke/*/manifest.json | head -1)" \
  || { echo "error: the runs did not use the imported stand-in" >&2; exit 1; }
echo "rehearsal passed in $(( $(date +%s) - start )) s: $(du -h "$tmp/out/results.tar.gz" | cut -f1) of results"
