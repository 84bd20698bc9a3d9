#!/usr/bin/env bash
# D2L on SmolLM2-135M-Instruct, CPU (from the repo root, after `make setup`):
#   bash experiments/d2l_smollm2/run.sh            # seed0 then seed1
#   bash experiments/d2l_smollm2/run.sh seed1      # one of them
# Each run trains the hypernet (conf/experiment/d2l_smollm2.yaml) and evaluates the four conditions on held-out
# documents; runs/d2l_smollm2/<name>/ holds everything, experiments/d2l_smollm2/results/<name>/ the small files.
# The teacher's top-k cache is shared by the seeds (it does not depend on the seed). Then:
#   python experiments/d2l_smollm2/report.py experiments/d2l_smollm2/results/seed0 experiments/d2l_smollm2/results/seed1
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/d2l_smollm2}
RES=experiments/d2l_smollm2/results
KEEP="summary.json config.yaml metrics.jsonl eval.json"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}   # on a shared 2-core machine one thread per run is the fastest
export HF_HUB_OFFLINE=1
# shellcheck source=experiments/run_one.sh
source experiments/run_one.sh

declare -A RUNS=(
  # the preset: CE + KL to the in-context teacher on the sentence reply, 600 steps
  [seed0]="+experiment=d2l_smollm2 seed=0 algo.kl_cache_dir=$OUT/teacher_cache"
  [seed1]="+experiment=d2l_smollm2 seed=1 algo.kl_cache_dir=$OUT/teacher_cache"
  # a quarter of the steps: the hypernet has not yet learned to read the document
  [short_s0]="+experiment=d2l_smollm2 seed=0 algo.kl_cache_dir=$OUT/teacher_cache trainer.max_steps=150"
  [short_s1]="+experiment=d2l_smollm2 seed=1 algo.kl_cache_dir=$OUT/teacher_cache trainer.max_steps=150"
  # CE only, on the bare answer ("Oslo"): every labelled token is the fact, no teacher
  [ce_answer_s0]="+experiment=d2l_smollm2 seed=0 algo.kl_coef=0 data.params.reply=answer"
  # CE only on the preset's sentence reply: the teacher term alone removed
  [ce_sentence_s0]="+experiment=d2l_smollm2 seed=0 algo.kl_coef=0"
)
ORDER=(seed0 seed1 short_s0 short_s1 ce_answer_s0 ce_sentence_s0)
run_listed "${@:-${ORDER[@]}}"
