#!/usr/bin/env bash
# experiments/grpo_smollm2/run.sh NAME [overrides...]   e.g.  run.sh lora_s1 seed=1 data.seed=1
#
# One run of `python train.py +experiment=grpo_smollm2_add [overrides...]` under `/usr/bin/time -v` (peak RSS, CPU
# seconds) at nice 10, with the load average at start and end. The run itself goes to runs/grpo_smollm2/NAME/
# (git-ignored; its checkpoint is deleted afterwards); its small files are copied to results/NAME/ (git-ignored too):
# config.yaml, .hydra/overrides.yaml (read by posttrain.analysis.load_runs), summary.json, metrics.jsonl,
# heldout_*.jsonl, time_v.txt, loadavg.txt, commit.txt (the code that ran) and console_tail.txt (the run's final
# table). `python experiments/grpo_smollm2/report.py --collect` then turns them into results/*.csv (tracked).
# OMP_NUM_THREADS defaults to 1 here: on a shared 2-core machine two OpenMP threads stall each other.
set -euo pipefail
name=${1:?usage: run.sh NAME [overrides...]}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/experiments/grpo_smollm2/results/$name
run=$root/runs/grpo_smollm2/$name
py=${PYTHON:-$root/.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1

rm -rf "$run" "$out"
mkdir -p "$out" "$run"
{
  echo "commit $(git -C "$root" rev-parse HEAD)"
  echo "src/conf changes vs commit: $(git -C "$root" status --porcelain -- src conf train.py | wc -l) files"
  echo "OMP_NUM_THREADS=$OMP_NUM_THREADS"
  echo "command: python train.py +experiment=grpo_smollm2_add $*"
} >"$out/commit.txt"
echo "start $(date -Is) $(cat /proc/loadavg)" >"$out/loadavg.txt"
rc=0
(cd "$root" && /usr/bin/time -v -o "$out/time_v.txt" nice -n 10 "$py" train.py +experiment=grpo_smollm2_add "$@" \
  hydra.run.dir="$run") >"$run/console.txt" 2>&1 || rc=$?
echo "end   $(date -Is) $(cat /proc/loadavg)" >>"$out/loadavg.txt"

cp "$run/config.yaml" "$run/metrics.jsonl" "$out/"
mkdir -p "$out/.hydra" && cp "$run/.hydra/overrides.yaml" "$out/.hydra/"
for f in summary.json heldout_before.jsonl heldout_after.jsonl; do [ -f "$run/$f" ] && cp "$run/$f" "$out/"; done
tr '\r' '\n' <"$run/console.txt" | grep -v '^[[:space:]]*$' | tail -n 30 >"$out/console_tail.txt"
rm -rf "$run/checkpoints"
exit $rc
