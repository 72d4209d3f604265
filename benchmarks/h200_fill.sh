#!/usr/bin/env bash
# A fill on the GPU machine that resumes across calls and sessions. Rows go to JSONL shards in .gpu/report
# (`bench fill --out`: what it holds is not measured again); a machine kept warm keeps them between calls,
# and SEED=DIR (shards committed by an earlier session, e.g. benchmarks/results/h200_report) is copied in
# first, so a fresh machine resumes too. SIGINT at SECS (leave a minute of the call's limit for the
# drain) writes every finished row and the summary; the shards come back as $OUT/rows.tgz (one file:
# $OUT returns at most 8), with the summary and the log.
# Usage: SECS=480 [SEED=DIR] benchmarks/h200_fill.sh OPS... [fill flags]
#
# BG=1: the fill runs in a session of its own (setsid), which outlives the call while the machine is held,
# so one fill spans several calls without restarting workers or draining between them: SECS is then its
# deadline from its start (the device time the session has left, less the final drain), and each call waits
# at most WAIT_S (default 540) for it, then returns the shards so far. The next call, made within the
# machine's idle release (30 s), runs the same command: with the fill still running it only waits again.
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
fill=(timeout --foreground -s INT "${SECS:-480}" python3 -m popcorn.cli bench fill "$@" --out "$shards")
if [ -z "${BG:-}" ]; then
  "${fill[@]}" >"$OUT/fill_summary.txt" 2>"$PWD/.gpu/fill_log.raw"
  echo "fill exit $?"
else
  pid=$(cat .gpu/fill.pid 2>/dev/null)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    echo "fill $pid still running: waiting for it"
  else  # the summary and log stay in .gpu: $OUT is emptied before each call
    setsid bash -c '"$@" >.gpu/fill_summary.txt 2>.gpu/fill_log.raw; echo "fill exit $?" >>.gpu/fill_summary.txt' \
      fill "${fill[@]}" </dev/null &
    echo $! >.gpu/fill.pid
    echo "fill $! started in its own session, deadline ${SECS:-480} s"
  fi
  pid=$(cat .gpu/fill.pid)
  end=$((SECONDS + ${WAIT_S:-540}))
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
  kill -0 "$pid" 2>/dev/null && echo "fill $pid goes on; call again within 30 s to keep the machine"
  cp .gpu/fill_summary.txt "$OUT/fill_summary.txt" 2>/dev/null
fi
tr '\r' '\n' <"$PWD/.gpu/fill_log.raw" | grep -v ' ETA ' | gzip >"$OUT/fill_log.txt.gz"
tar -czf "$OUT/rows.tgz" -C "$shards" --exclude='*.lock' --exclude='.sentinels' .
cat "$OUT/fill_summary.txt" 2>/dev/null
