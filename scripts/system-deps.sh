#!/usr/bin/env bash
# System packages the build needs beyond libtorch: gloo's headers, which the
# torch wheel does not ship and c10d's ProcessGroupGloo (the CPU collectives
# of a run with world_size > 1) is compiled against (build.rs). Installs
# Debian's libgloo-dev where it is missing and this is root; otherwise says
# what to do and lets the build go on without CPU collectives.
# `system-deps.sh bench` and `system-deps.sh turbojpeg` also install libturbojpeg0-dev and
# libjpeg62-turbo-dev (benches/decode.rs, and the `turbojpeg` build feature's decoder).
set -euo pipefail
if { [ "${1:-}" = bench ] || [ "${1:-}" = turbojpeg ]; } && { [ ! -f /usr/include/turbojpeg.h ] || [ ! -f /usr/include/jpeglib.h ]; } && [ "$(id -u)" = 0 ]; then
  # TurboJPEG's API for whole images, libjpeg's (jpeglib.h) for a crop's region.
  echo "system-deps: installing libturbojpeg0-dev and libjpeg62-turbo-dev (libjpeg-turbo: benches/decode.rs, the turbojpeg feature)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libturbojpeg0-dev libjpeg62-turbo-dev >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libturbojpeg0-dev libjpeg62-turbo-dev >/dev/null; }
fi
[ -f "${TRICKLAB_GLOO_INCLUDE:-/usr/include}/gloo/context.h" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "system-deps: installing libgloo-dev (gloo headers for c10d's ProcessGroupGloo)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgloo-dev >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgloo-dev >/dev/null; }
  # A build made before the headers were there has no Gloo: rebuild the shim.
  touch src/native/native.cpp
else
  echo "system-deps: no gloo headers: install libgloo-dev (sudo apt-get install libgloo-dev) for runs with world_size > 1" >&2
fi
