#!/usr/bin/env bash
# bash experiments/kernels/run_tables.sh [TAG]   (from anywhere; the fused vs two-GEMM runs, then results/report.md)
#
# One `python -m posttrain.bench grpo_loss` invocation per (shape, dtype): two_gemm, fused and its variants, ROUNDS
# rounds round-robin, each (backend, round) its own process. Writes
#   results/<N>x<H>x<V>_<dtype>_<TAG>.jsonl           one JSON line per backend (min seconds, all rounds, loadavg)
#   results/<N>x<H>x<V>_<dtype>_<TAG>.progress.jsonl  every single run as it finished
# (both git-ignored), prints /proc/loadavg around each invocation and the markdown tables at the end (table.py),
# then merges the runs into results/bench.csv and rewrites results/report.md (report.py --collect).
# Environment: PYTHON (default: python), ROUNDS (default: 3), EXTRA_BACKENDS (e.g. eager,chunked: appended
# to the fp32 runs), SHAPES (default: "1024,1024,131072 2048,2880,201088"), DTYPES (default: "fp32 bf16").
# Takes ~10 min on an idle 2-core Sapphire Rapids; run it with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
ROUNDS=${ROUNDS:-3}
TAG=${1:-$(date +%Y%m%d-%H%M)}
OUT=experiments/kernels/results
files=()
for SHAPE in ${SHAPES:-1024,1024,131072 2048,2880,201088}; do
  for DTYPE in ${DTYPES:-fp32 bf16}; do
    if [ "$DTYPE" = bf16 ]; then
      BACKENDS=fused,fused@upcast,fused@tiles
    else
      BACKENDS=fused,fused@tiles${EXTRA_BACKENDS:+,$EXTRA_BACKENDS}
    fi
    FILE=$OUT/${SHAPE//,/x}_${DTYPE}_${TAG}
    echo "== --shape $SHAPE --dtype $DTYPE --backends $BACKENDS --rounds $ROUNDS; loadavg before: $(cat /proc/loadavg)" >&2
    "$PYTHON" -m posttrain.bench grpo_loss --shape "$SHAPE" --dtype "$DTYPE" --backends "$BACKENDS" \
      --rounds "$ROUNDS" > "$FILE.jsonl" 2> "$FILE.progress.jsonl"
    echo "   loadavg after: $(cat /proc/loadavg) -> $FILE.jsonl" >&2
    files+=("$FILE.jsonl")
  done
done
"$PYTHON" experiments/kernels/table.py "${files[@]}"
"$PYTHON" experiments/kernels/report.py --collect "${files[@]}" > /dev/null
