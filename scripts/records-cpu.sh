#!/usr/bin/env bash
# Does the engine's ablation tell each record's story? For each published record, its
# script matrix (the record's own code, one trick taken back at a time) and the engine's
# leave-one-out of the same tricks, run at CPU scale, then read side by side by
# `tricklab parity --tricks` into OUT/RECORD.md and .csv, each page headed by the machine,
# the versions and the commands that made it.
#
#   scripts/records-cpu.sh [RECORD...]     (default: all five; `make records`)
#
# RECORD: airbench94 airbench94-muon speedrun hlb page-final. The records' copies must
# be in peers/ (each script matrix's header has its `git clone`).
# CPU scale is each script matrix's own (`params`): the embedded 4000/1000 images and a
# few epochs; the engine side is set to the same epochs and data. On a CPU the scripts'
# adapter runs fp32, so the engine side is forced to fp32 too (`--force fp16=off
# --force muon_fp16_momentum=off`): its `- fp16` variant then trains as its base, as the
# script's does.
# Environment: TRICKLAB (default target/release/tricklab), REPEATS (2: the fewest that
# give an interval), EPOCHS (both sides' epochs instead of the script matrix's CPU scale:
# `EPOCHS=1` for a shorter rehearsal), RESULTS (results/records-cpu), OUT
# (results/reference/records-cpu-DATE).
set -euo pipefail
cd "$(dirname "$0")/.."
TRICKLAB=${TRICKLAB:-target/release/tricklab}
REPEATS=${REPEATS:-2}
RESULTS=${RESULTS:-results/records-cpu}
OUT=${OUT:-results/reference/records-cpu-$(date +%F)}
records=("$@")
[ ${#records[@]} -gt 0 ] || records=(airbench94 airbench94-muon speedrun hlb page-final)
[ -x "$TRICKLAB" ] || { echo "records-cpu: no $TRICKLAB; build it (make build) or set TRICKLAB" >&2; exit 2; }
# The scripts' `python3` is the one with torch.
[ -x .venv/bin/python3 ] && export PATH="$PWD/.venv/bin:$PATH"
mkdir -p "$OUT" "$RESULTS"

for r in "${records[@]}"; do
    engine_extra=()
    case $r in
        airbench94)      engine=airbench94-loo;      epochs=2 ;;
        airbench94-muon) engine=airbench94-muon-loo; epochs=3 ;;
        speedrun)        engine=speedrun-loo;        epochs=3 ;;
        hlb)             engine=hlb-loo;             epochs=11.99 ;;
        # new_dawn.py's test set: 96 a class (its script matrix says why).
        page-final)      engine=page-final-loo;      epochs=3; engine_extra=(--set test_per_class=96) ;;
        *) echo "records-cpu: no record \`$r\`: choose from airbench94 airbench94-muon speedrun hlb page-final" >&2; exit 2 ;;
    esac
    script=$r-script
    script_extra=()
    if [ -n "${EPOCHS:-}" ]; then
        epochs=$EPOCHS
        script_extra=(--set "epochs=$EPOCHS")
    fi
    script_cmd=("$TRICKLAB" run --headless "ablations/$script.toml" --repeats "$REPEATS"
                --devices cpu --results "$RESULTS" "${script_extra[@]}")
    engine_cmd=("$TRICKLAB" run --headless "ablations/$engine.toml" --repeats "$REPEATS"
                --devices cpu --results "$RESULTS" --set "epochs=$epochs" "${engine_extra[@]}"
                --force fp16=off --force muon_fp16_momentum=off --insist)
    # A failed run is in its folder and the page counts it (n); the other side still runs.
    echo "== $r: the script's side" >&2
    "${script_cmd[@]}" >&2 || echo "records-cpu: $r: some of the script's runs failed (above); reading what finished" >&2
    echo "== $r: the engine's side" >&2
    "${engine_cmd[@]}" >&2 || echo "records-cpu: $r: some of the engine's runs failed (above); reading what finished" >&2
    # The folders each run just made: the newest of its matrix.
    script_dir=$(ls -td "$RESULTS/$script"/*/ | head -1)
    engine_dir=$(ls -td "$RESULTS/$engine"/*/ | head -1)
    "$TRICKLAB" parity --tricks "$engine_dir" "$script_dir" --out "$OUT/$r" >/dev/null
    {
        head -1 "$OUT/$r.md"
        echo
        echo "Made by scripts/records-cpu.sh $r, $(date -u '+%F %H:%M') UTC:"
        echo
        echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; one CPU worker a side, the sides one after the other"
        echo "- tricklab $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo ' (with local changes)'), $($TRICKLAB --version 2>/dev/null | head -1); $(python3 -c 'import torch,sys; print("python", sys.version.split()[0], "torch", torch.__version__)')"
        echo "- $REPEATS seeds a variant a side; the script's side first:"
        echo
        echo '```sh'
        echo "${script_cmd[*]}"
        echo "${engine_cmd[*]}"
        echo "$TRICKLAB parity --tricks $engine_dir $script_dir --out $OUT/$r"
        echo '```'
        tail -n +2 "$OUT/$r.md"
    } > "$OUT/$r.md.tmp"
    mv "$OUT/$r.md.tmp" "$OUT/$r.md"
    echo "== $r: $OUT/$r.md" >&2
done
