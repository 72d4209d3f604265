#!/usr/bin/env bash
# A fill on the GPU machine that resumes across calls and sessions. Rows go to JSONL shards in .gpu/report
# (`bench fill --out`: what it holds is not measured again); a machine kept warm keeps them between calls,
# and SEED=DIR (shards committed by an earlier session, e.g. benchmarks/results/h200_report) is copied in
# first, so a fresh machine resumes too. SIGINT at SECS (leave a minute of the call's limit for the
# drain) writes every finished row and the summary; the shards come back as $OUT/rows.tgz (one file:
# $OUT returns at most 8), with the summary and the log.
# Usage: SECS=480 [SEED=DIR] benchmarks/h200_fill.sh OPS... [fill flags]
# The wheel folders carried in this call (benchmarks/gpu_wheels.sh) are installed into /tmp/site first.
set -u
bash "$(dirname "$0")/gpu_install.sh"
. "$(dirname "$0")/gpu_env.sh"
shards=$PWD/.gpu/report
mkdir -p "$shards" "${OUT:=/tmp/out}"
if [ -n "${SEED:-}" ]; then
  for f in "$SEED"/*.jsonl; do [ -e "$shards/$(basename "$f")" ] || cp "$f" "$shards/"; done
fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
timeout --foreground -s INT "${SECS:-480}" python3 -m popcorn.cli bench fill "$@" --out "$shards" \
  >"$OUT/fill_summary.txt" 2>"$OUT/fill_log.raw"
echo "fill exit $?"
tr '\r' '\n' <"$OUT/fill_log.raw" | grep -v ' ETA ' | gzip >"$OUT/fill_log.txt.gz"; rm -f "$OUT/fill_log.raw"
tar -czf "$OUT/rows.tgz" -C "$shards" --exclude='*.lock' --exclude='.sentinels' .
cat "$OUT/fill_summary.txt"
