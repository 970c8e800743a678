#!/usr/bin/env bash
# Packs what a GPU machine needs to measure tricklab into one git-ignored folder
# that fits the 64 MiB the device tool carries: the stripped release binary
# (xz), the JPEG stand-in of CIFAR-10, the matrices and scripts/gpu-run.sh.
#
# usage: scripts/gpu-bundle.sh [OUT]        (default .device/bundle)
# env:   BIN   the binary (default target/release/tricklab; `make gpu-bundle` builds it)
#        DATA  the stand-in archive (default ../shared/data/cifar10-jpeg-q75.tar.gz)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.device/bundle}
BIN=${BIN:-target/release/tricklab}
DATA=${DATA:-../shared/data/cifar10-jpeg-q75.tar.gz}
LIMIT=$((64 * 1024 * 1024))

[ -x "$BIN" ] || { echo "error: $BIN is missing: run \`make build\` first (or set BIN=)" >&2; exit 1; }
[ -f "$DATA" ] || { echo "error: $DATA is missing: set DATA= to the cifar10-jpeg-q75.tar.gz stand-in" >&2; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT/ablations" "$OUT/scripts"
# The release profile strips already; strip again so a debug BIN also travels small.
strip -o "$OUT/tricklab" "$BIN"
xz -T0 -6 "$OUT/tricklab"
cp "$DATA" "$OUT/cifar10-jpeg-q75.tar.gz"
cp ablations/*.toml "$OUT/ablations/"
cp scripts/gpu-run.sh "$OUT/scripts/"
{
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  sha256sum "$OUT/tricklab.xz" "$OUT/cifar10-jpeg-q75.tar.gz" | sed "s| $OUT/| |"
} > "$OUT/BUNDLE.txt"

size=$(du -sb "$OUT" | cut -f1)
echo "bundle: $OUT, $((size / 1024 / 1024)) MiB of the 64 MiB the device tool carries"
if [ "$size" -gt "$LIMIT" ]; then
  echo "error: $OUT is $size bytes, over 64 MiB: drop matrices or compress harder (xz -9)" >&2
  exit 1
fi
