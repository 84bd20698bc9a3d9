#!/usr/bin/env bash
# One experiment run with its cost recorded (sourced by experiments/*/run.sh):
#   run_one NAME TRAIN_ARGS   with OUT (scratch runs folder), RES (results folder), KEEP (files to keep), PY set.
# Writes $OUT/NAME/ (the Hydra run dir, stdout.log) and copies $KEEP from it to $RES/NAME/, beside time_v.txt
# (/usr/bin/time -v: CPU seconds, wall, peak RSS) and loadavg.txt (the 1/5/15-min load every 30 s).
# DRY_RUN=1: print "NAME ARGS" instead of running.
run_one() {
  local name=$1 args=$2 dir=$OUT/$1
  if [ -n "${DRY_RUN:-}" ]; then
    echo "$name" $args
    return 0
  fi
  mkdir -p "$dir" "$RES/$name"
  # the first sample is written here: a run shorter than the sampler's start-up still leaves one line
  echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)" > "$RES/$name/loadavg.txt"
  ( while sleep 30; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; done ) >> "$RES/$name/loadavg.txt" 2>/dev/null &
  local sampler=$!
  # shellcheck disable=SC2086
  /usr/bin/time -v -o "$RES/$name/time_v.txt" nice -n 10 "$PY" train.py $args hydra.run.dir="$dir" \
    > "$dir/stdout.log" 2>&1 || { kill "$sampler"; echo "$name failed: see $dir/stdout.log"; return 1; }
  kill "$sampler"
  for f in $KEEP; do
    if [ -f "$dir/$f" ]; then cp "$dir/$f" "$RES/$name/"; fi
  done
  echo "$name done: $(grep -E 'Elapsed' "$RES/$name/time_v.txt")"
}

# run_listed NAME...: run_one for each name with its arguments from the caller's associative array RUNS (ORDER
# lists every name, for the message about an unknown one).
run_listed() {
  local name
  for name in "$@"; do
    [ -n "${RUNS[$name]+x}" ] || { echo "unknown run $name (one of: ${ORDER[*]})"; return 2; }
    run_one "$name" "${RUNS[$name]}" || return 1
  done
}
