#!/usr/bin/env bash
# On the GPU machine (no network): install the carried wheel folders of benchmarks/gpu_wheels.sh into
# /tmp/site, whichever have arrived in this call; run it in every call, it repeats nothing.
#   .whl .whl2 .whl3   installed as they are (deltalake unpacked from .whl2/deltalake.tar.xz)
#   .whl4a .whl4b      quack's and flash-attn-4's closure: the small wheels at once, the two parts of the
#                      CuTe DSL's CUDA 13 libraries (an xz tarball of the unpacked wheel) kept in /tmp/parts
#                      (it outlives a call while the machine stays warm) and unpacked into /tmp/site once
#                      both have come
# Then: . benchmarks/gpu_env.sh (PYTHONPATH and PATH for /tmp/site, its .pth files included)
set -euo pipefail
cd "$(dirname "$0")/.."
site=/tmp/site parts=/tmp/parts
mkdir -p "$site" "$parts"
# each folder into a fresh target, then merged: `pip install --target` into a non-empty folder replaces its
# top-level folders, bin/ included, so a later call's wheels would delete an earlier call's scripts
# (dagster-daemon, which a sweep resumed in that later call needs)
pipi() {
  local t; t=$(mktemp -d)
  { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$t" "$@" >/dev/null 2>&1 ||
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$t" "$@"; } &&
    cp -a "$t"/. "$site"/ && rm -rf "$t"
}
for d in .whl .whl2 .whl3 .whl4a .whl4b; do
  if compgen -G "$d/*.whl" >/dev/null && [ ! -f "$parts/$d.done" ]; then pipi "$d"/*.whl && touch "$parts/$d.done"; fi
done
if [ -f .whl2/deltalake.tar.xz ] && [ ! -d "$site/deltalake" ]; then tar -xJf .whl2/deltalake.tar.xz -C "$site"; fi
for d in .whl4a .whl4b; do cp -n "$d"/cutlass-cu13.tar.xz.part-* "$parts"/ 2>/dev/null || true; done
if [ ! -f "$parts/cu13.done" ] && [ -f "$parts/cutlass-cu13.tar.xz.part-aa" ] && [ -f "$parts/cutlass-cu13.tar.xz.part-ab" ]; then
  cat "$parts"/cutlass-cu13.tar.xz.part-a? | xz -d | tar -xf - -C "$site" && touch "$parts/cu13.done" &&
    rm -f "$parts"/cutlass-cu13.tar.xz.part-a?
fi
echo "gpu_install: $(ls "$parts" | tr '\n' ' ')"
