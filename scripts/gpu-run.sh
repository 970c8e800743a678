#!/usr/bin/env bash
# On the GPU machine, from the root of the bundle that scripts/gpu-bundle.sh made:
# unpack the binary, point it at this machine's torch 2.11.0, run `doctor`, import
# the stand-in data, run the matrices headless on it, write each folder's report
# and charts, and leave everything in ONE tarball under $OUT (the device tool
# brings back at most 8 files of 16 MiB).
#
# usage: OUT=/path/to/out bash scripts/gpu-run.sh [MATRIX...]   (default: ablations/page-ladder.toml)
# env:   PYTHON   a python whose torch is 2.11.0 (default python3)
#        DEVICES  tricklab --devices (default cuda)
#        REPEATS  seeds per variant, overriding each matrix's own (default: the matrix's)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
PYTHON=${PYTHON:-python3}
DEVICES=${DEVICES:-cuda}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
log() { echo "gpu-run: $*" | tee -a "$OUT/gpu-run.log"; }

[ -x tricklab ] || { xz -dkf tricklab.xz && chmod +x tricklab; }
TORCH_DIR=$("$PYTHON" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
# The binary's RUNPATH names the build machine's venv; LD_LIBRARY_PATH wins over it.
export LD_LIBRARY_PATH="$TORCH_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TRICKLAB_DATA="$PWD/data"
log "torch $("$PYTHON" -c 'import torch; print(torch.__version__)') from $TORCH_DIR"
cat BUNDLE.txt >> "$OUT/gpu-run.log" 2>/dev/null || true
{ nvidia-smi 2>&1 || echo "no nvidia-smi"; } > "$OUT/nvidia-smi.txt"

./tricklab doctor --results results | tee "$OUT/doctor.txt"
ldd ./tricklab | grep -E 'libtorch|libc10|cudart|cudnn' > "$OUT/ldd.txt" || true

if [ ! -f data/cifar10-jpeg/dataset.tlds ]; then
  log "importing the stand-in data"
  ./tricklab data import cifar10-jpeg-q75.tar.gz --name cifar10-jpeg 2>&1 | tee -a "$OUT/gpu-run.log"
fi

matrices=("$@")
[ ${#matrices[@]} -gt 0 ] || matrices=(ablations/page-ladder.toml)
repeats=()
[ -z "${REPEATS:-}" ] || repeats=(--repeats "$REPEATS")
log "running ${matrices[*]} on $DEVICES"
start=$(date +%s)
status=0
./tricklab run "${matrices[@]}" --headless --devices "$DEVICES" --data cifar10-jpeg \
  --results results "${repeats[@]}" 2>&1 | tee -a "$OUT/run.log" || status=$?
log "run exited $status after $(( $(date +%s) - start )) s"

# The newest session folder of each matrix run here: its report, with every clock.
for m in "${matrices[@]}"; do
  name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$m" | head -1)
  dir=$(ls -d "results/$name"/*/ 2>/dev/null | sort | tail -1)
  [ -n "$dir" ] || { log "no results for $m"; continue; }
  for clock in dawn airbench hlb wall; do
    ./tricklab report "$dir" --clock "$clock" > "$dir/report-$clock.md" 2>&1 || true
  done
  ./tricklab report "$dir" --format csv > "$dir/report.csv" 2>&1 || true
  ./tricklab report "$dir" --plots "$dir" > /dev/null 2>&1 || true
done

cp "$OUT"/*.txt "$OUT"/*.log results/ 2>/dev/null || true
tar czf "$OUT/results.tar.gz" results
log "wrote $OUT/results.tar.gz ($(du -h "$OUT/results.tar.gz" | cut -f1))"
exit "$status"
