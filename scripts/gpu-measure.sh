#!/usr/bin/env bash
# Issue 32's measurements on a lent GPU machine, batched into one call of the
# device tool: each STEP runs under one shared deadline, so that the call ends
# inside the tool's 10-minute limit with everything measured so far packed into
# $OUT/measure.tar.gz (plus $OUT/measure.log, which the reply's tail shows).
#
# From the repository root, with the bundle (`make gpu-bundle`) carried as
# .device/bundle and the published scripts' copies carried as .device/peers:
#
#   OUT=out DEADLINE=560 bash scripts/gpu-measure.sh provenance smoke \
#       parity:airbench94:9.9:10 parity:page-final:10:5 ladder:page-ladder:3
#
# STEP:   provenance                      nvidia-smi, driver, CUDA, cuDNN, NCCL, doctor, ldd
#         smoke                           ablations/gpu-smoke.toml (fp32 then fp16)
#         parity:RECIPE:EPOCHS:SEEDS      `tricklab parity` on the full stand-in, --device "$DEVICE"
#         ladder:MATRIX:REPEATS           `tricklab run ablations/MATRIX.toml`, then its reports
#         resume:PATH                     `tricklab run --resume` of a carried results folder
#         train:RECIPE:SEEDS              `tricklab train` REPEATS times (the workbench's overhead)
#         stream:CLASSES:PER_CLASS:RECIPE an ImageNet-like synthetic folder (`data synth`, the
#                                         machine has no ImageNet): the loader's images/s on
#                                         every core beside torchvision's on the same files,
#                                         then one `tricklab train` of RECIPE (a streaming
#                                         one, e.g. ffcv-rn18) from it on "$DEVICE"
#         store:CLASSES:PER_CLASS:MAX_SIDE the same synthetic folder as a streaming store
#                                         (`data import --max-side`, named synth-store), then
#                                         that store's images/s through the loader
#         trainon:DATA:RECIPE[:K=V,K=V]   one `tricklab train` of RECIPE from DATA (a folder, a
#                                         store's name, or synth for the stream step's folder)
#                                         on "$DEVICE", with the --set values given
#         split:PEER:EPOCHS:SEEDS:FORMS   torch.compile's gain split (issue 48): the published script PEER
#                                         (airbench94-muon or hiverge-speedrun) run by peer.py once per
#                                         seed in each FORM (comma-separated: eager, graphs, fusion, both,
#                                         published), forms interleaved seed by seed, one JSON line a run
#                                         in split-PEER.jsonl
#         launch                          scripts/bench/graph_launch.py: eager launches against a CUDA
#                                         graph's replay of the same small kernels (launch.json)
#         STEP@N                          any of these, given at most N seconds of what is left (so
#                                         that a long step cannot starve the ones after it)
# env:    DEADLINE  seconds from the start after which no step starts and the
#                   running one is interrupted (default 560)
#         PYTHON    a python whose torch is 2.11.0 (default python3)
#         DEVICE    cuda (default), or cpu for a rehearsal here
#         TRAIN_PER_CLASS, TEST_PER_CLASS  parity images a class (default 5000, 1000: all)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DEADLINE=${DEADLINE:-560}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
BUNDLE=$ROOT/.device/bundle
PEERS=$ROOT/.device/peers
WORK=$OUT/measure
mkdir -p "$WORK"
START=$(date +%s)
log() { echo "measure [$(( $(date +%s) - START )) s] $*" | tee -a "$OUT/measure.log"; }
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }

cd "$BUNDLE" || { echo "error: $BUNDLE is missing: run make gpu-bundle and carry .device/bundle" >&2; exit 1; }
# Unpacked outside the carried bundle, which must stay under the 64 MiB the device tool carries.
TL=/tmp/tricklab-bin/tricklab
[ -x "$TL" ] || { mkdir -p "${TL%/*}" && xz -dc tricklab.xz > "$TL" && chmod +x "$TL"; }
TORCH_DIR=$("$PYTHON" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
# The binary's RUNPATH names the build machine's venv; LD_LIBRARY_PATH wins over it.
export LD_LIBRARY_PATH="$TORCH_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Outside the carried bundle (176 MB imported): it must not travel back with the next call.
export TRICKLAB_DATA=${TRICKLAB_DATA:-/tmp/tricklab-data}
RESULTS=$WORK/results
# torch.compile's caches (hiverge's max-autotune took over 290 s in a fresh
# process on the first H100 lease): restored from an earlier call's
# $OUT/inductor-cache.tar.gz carried as .device/inductor-cache.tar.gz, and
# packed again at the end, so the compilation is paid once across calls.
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
if [ -f "$ROOT/.device/inductor-cache.tar.gz" ]; then
  tar xzf "$ROOT/.device/inductor-cache.tar.gz" -C "$TORCHINDUCTOR_CACHE_DIR"
fi
if [ ! -f "$TRICKLAB_DATA/cifar10-jpeg/dataset.tlds" ]; then
  "$TL" data import cifar10-jpeg-q75.tar.gz --name cifar10-jpeg >> "$OUT/measure.log" 2>&1
fi

# Runs one step's command with what is left of the deadline, interrupting it
# (SIGINT: the headless run stores what finished) when time is up.
timed() {
  local t
  t=$(left)
  if [ -n "$STEP_END" ]; then
    local s_left=$(( STEP_END - $(date +%s) ))
    [ "$s_left" -lt "$t" ] && t=$s_left
  fi
  if [ "$t" -le 10 ]; then log "skipped (deadline): $*"; return 124; fi
  log "start ($t s left): $*"
  local s=$(date +%s) rc=0
  timeout -s INT -k 30 "$t" "$@" >> "$OUT/measure.log" 2>&1 || rc=$?
  log "end rc=$rc after $(( $(date +%s) - s )) s: $1 $2"
  return $rc
}

# Every clock's report, a CSV and the charts of a results folder.
reports() {
  local dir=$1
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  for clock in dawn airbench hlb wall; do
    "$TL" report "$dir" --clock "$clock" > "$dir/report-$clock.md" 2>&1
  done
  "$TL" report "$dir" --format csv > "$dir/report.csv" 2>&1
  "$TL" report "$dir" --plots "$dir" > /dev/null 2>&1
  cat "$dir/report-wall.md" >> "$OUT/measure.log"
}

for step in "$@"; do
  STEP_END=
  case "$step" in *@*) STEP_END=$(( $(date +%s) + ${step##*@} )); step=${step%@*} ;; esac
  IFS=: read -r kind a b c d <<< "$step"
  case "$kind" in
    provenance)
      {
        echo "## date"; date -u +%Y-%m-%dT%H:%M:%SZ
        echo "## bundle"; cat BUNDLE.txt
        echo "## nvidia-smi"; nvidia-smi
        echo "## nvidia-smi -q (clocks, power, persistence)"
        nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE 2>&1 | head -120
        echo "## nvidia-smi topo"; nvidia-smi topo -m 2>&1
        echo "## uname"; uname -a
        echo "## cpu"; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket' ; free -g
        echo "## python / torch"
        "$PYTHON" - <<'EOF'
import torch, sys, platform
print("python", sys.version.split()[0])
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
p = torch.cuda.get_device_properties(0)
print("device", torch.cuda.get_device_name(0), "cc", f"{p.major}.{p.minor}", "SMs", p.multi_processor_count,
      "memory GiB", round(p.total_memory / 2**30, 1))
try:
    import torchvision; print("torchvision", torchvision.__version__)
except Exception as e:
    print("torchvision missing:", e)
EOF
        echo "## ldd"; ldd "$TL" | grep -E 'libtorch|libc10|cudart|cudnn|nccl'
        echo "## tricklab doctor"; "$TL" doctor --results "$RESULTS"
        echo "## tricklab doctor --json"; "$TL" doctor --results "$RESULTS" --json
      } > "$WORK/provenance.txt" 2>&1
      log "provenance: $(grep -E '^(torch|device|nccl) ' "$WORK/provenance.txt" | tr '\n' ';')"
      ;;
    smoke)
      timed "$TL" run ablations/gpu-smoke.toml --headless --devices "$DEVICE" --data cifar10-jpeg \
        --results "$RESULTS"
      ;;
    parity)
      timed "$TL" parity "$a" --peers "$PEERS" --data cifar10-jpeg --train-per-class "${TRAIN_PER_CLASS:-5000}" \
        --test-per-class "${TEST_PER_CLASS:-1000}" --epochs "$b" --seeds "$c" --device "$DEVICE" --python "$PYTHON" \
        --out "$WORK/parity-$a.md"
      ;;
    ladder)
      timed "$TL" run "ablations/$a.toml" --headless --devices "$DEVICE" --data cifar10-jpeg \
        --results "$RESULTS" --repeats "$b"
      reports "$(ls -d "$RESULTS/$a"/*/ 2>/dev/null | sort | tail -1)"
      ;;
    resume)
      # A folder an earlier call left unfinished (carried back in): its failed
      # and unstarted runs, on this call's machine.
      dir=$RESULTS/$(basename "$(dirname "$ROOT/$a")")/$(basename "$ROOT/$a")
      mkdir -p "$(dirname "$dir")" && cp -r "$ROOT/$a" "$dir"
      timed "$TL" run --resume "$dir" --headless --devices "$DEVICE"
      reports "$dir"
      ;;
    train)
      for s in $(seq 0 $(( b - 1 ))); do
        timed "$TL" train --recipe "$a" --device "$DEVICE" --data cifar10-jpeg --seed "$s" || break
      done
      ;;
    stream)
      synth=/tmp/tricklab-synth-$a-$b
      [ -d "$synth" ] || timed "$TL" data synth "$synth" --classes "$a" --train-per-class "$b" \
        --val-per-class $(( b / 10 > 0 ? b / 10 : 1 ))
      timed "$TL" data stream "$synth" --size 224 --batch 256 --decode-only
      timed "$TL" data stream "$synth" --size 160 --batch 1024
      timed "$PYTHON" "$ROOT/scripts/bench/torchvision_loader.py" "$synth" --workers "$(nproc)" \
        --batch 256 --size 224 --epochs 2
      timed "$TL" train --recipe "$c" --device "$DEVICE" --data "$synth" --seed 0 --target 0.5
      ;;
    store)
      synth=/tmp/tricklab-synth-$a-$b
      [ -d "$synth" ] || timed "$TL" data synth "$synth" --classes "$a" --train-per-class "$b" \
        --val-per-class $(( b / 10 > 0 ? b / 10 : 1 ))
      timed "$TL" data import "$synth" --name synth-store --max-side "$c"
      timed "$TL" data stream synth-store --size 224 --batch 256
      ;;
    trainon)
      data=$a
      [ "$data" = synth ] && data=$(ls -d /tmp/tricklab-synth-* | head -1)
      sets=()
      IFS=: read -r _ _ _ kv <<< "$step"
      for s in ${kv//,/ }; do sets+=(--set "$s"); done
      timed "$TL" train --recipe "$b" --device "$DEVICE" --data "$data" --seed 0 --target 0.5 "${sets[@]}"
      ;;
    split)
      export_dir=/tmp/tricklab-export
      [ -f "$export_dir/meta.json" ] || timed "$TL" data export cifar10-jpeg --out "$export_dir"
      case "$a" in
        airbench94-muon) repo=$PEERS/cifar10-airbench ;;
        hiverge-speedrun) repo=$PEERS/cifar10-speedrun ;;
        *) log "split: no repository for $a"; continue ;;
      esac
      for s in $(seq 0 $(( c - 1 ))); do
        for form in ${d//,/ }; do
          if [ "$form" = eager ]; then flags=(--compile off); else flags=(--compile on --compile-form "$form"); fi
          timed "$PYTHON" "$ROOT/scripts/peers/peer.py" "$a" --repo "$repo" --data "$export_dir" --seed "$s" \
            --epochs "$b" --device "$DEVICE" "${flags[@]}" || continue
          line=$(tail -n 200 "$OUT/measure.log" | grep '^{"peer"' | tail -1)
          echo "$line" | sed "s/^{/{\"form\": \"$form\", /" >> "$WORK/split-$a.jsonl"
          log "split $a $form seed $s: $(echo "$line" | "$PYTHON" -c 'import json,sys; r=json.loads(sys.stdin.read()); print("clock %.3f s, step %.3f ms, tta %.2f %%" % (r["clock_s"], 1e3 * r["time_per_step_s"], 100 * r["acc_tta"]))')"
        done
      done
      ;;
    launch)
      timed "$PYTHON" "$ROOT/scripts/bench/graph_launch.py" && \
        grep '^{"torch"' "$OUT/measure.log" | tail -1 > "$WORK/launch.json"
      ;;
    *) log "unknown step $step"; ;;
  esac
done
log "done"
if [ -n "$(ls -A "$TORCHINDUCTOR_CACHE_DIR")" ]; then
  tar czf "$OUT/inductor-cache.tar.gz" -C "$TORCHINDUCTOR_CACHE_DIR" .
  log "inductor cache: $(du -h "$OUT/inductor-cache.tar.gz" | cut -f1) (carry it back as .device/inductor-cache.tar.gz; the tool brings back 16 MiB a file)"
fi
cp "$OUT/measure.log" "$WORK/"
tar czf "$OUT/measure.tar.gz" -C "$OUT" measure
log "packed $(du -h "$OUT/measure.tar.gz" | cut -f1)"
