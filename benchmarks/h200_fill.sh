#!/usr/bin/env bash
# A fill on the GPU machine that resumes across calls: rows accumulate in .gpu/cache (carried to the
# next call), SIGINT before the call's limit flushes them and prints the summary, and the op files,
# the summary and the log come back through $OUT. Usage: SECS=540 benchmarks/h200_fill.sh OPS... [fill flags]
# The wheel folders carried in this call (benchmarks/gpu_wheels.sh) are installed into /tmp/site first.
set -u
bash "$(dirname "$0")/gpu_install.sh"
. "$(dirname "$0")/gpu_env.sh"
export POPCORN_CACHE_DIR=$PWD/.gpu/cache
mkdir -p "$POPCORN_CACHE_DIR" "${OUT:=/tmp/out}"
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
timeout --foreground -s INT "${SECS:-540}" python3 -m popcorn.cli bench fill "$@" >"$OUT/fill_summary.txt" 2>"$OUT/fill_log.raw"
echo "fill exit $?"
tr '\r' '\n' <"$OUT/fill_log.raw" | grep -v ' ETA ' >"$OUT/fill_log.txt"; rm -f "$OUT/fill_log.raw"
cp "$POPCORN_CACHE_DIR"/v*/reports/*.jsonl "$OUT/" 2>/dev/null
cat "$OUT/fill_summary.txt"
