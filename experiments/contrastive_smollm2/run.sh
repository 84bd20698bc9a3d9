#!/usr/bin/env bash
# Contrastive vs LM-only on SmolLM2-135M-Instruct, CPU, one run at a time (from the repo root, after `make setup`):
#   bash experiments/contrastive_smollm2/run.sh                      # every run below, in order
#   bash experiments/contrastive_smollm2/run.sh base contrastive_s0  # some of them
# Each run writes runs/contrastive_smollm2/<name>/ and copies its small files (summary.json, config.yaml,
# metrics.jsonl, eval_*.jsonl, time_v.txt, loadavg.txt) to experiments/contrastive_smollm2/results/<name>/.
# Then: python experiments/contrastive_smollm2/report.py
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/contrastive_smollm2}
RES=experiments/contrastive_smollm2/results
KEEP="summary.json config.yaml metrics.jsonl eval_before.jsonl eval_after.jsonl eval_init.jsonl"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}   # on a shared 2-core machine one thread is the fastest (README)
export HF_HUB_OFFLINE=1
# shellcheck source=experiments/run_one.sh
source experiments/run_one.sh
ALL_TYPES='[ignore,fake_system,role_play,authority,fake_completion,answer_note,reply_order]'
ALL_KINDS='[email,rag_qa,code,calendar,document]'

declare -A RUNS=(
  # the base model on every task kind and attack type (train and held-out templates, held-out witnesses)
  [base]="+experiment=contrastive_smollm2 mode=eval eval.checkpoint=init data.num_eval=350
          data.params.task_kinds=$ALL_KINDS data.params.attack_types=$ALL_TYPES data.params.eval_templates=all"
  # the comparison: LM loss on benign rows only (the preset), with and without the contrastive term
  [contrastive_s0]="+experiment=contrastive_smollm2 seed=0"
  [lm_only_s0]="+experiment=contrastive_smollm2 seed=0 algo.contrastive_weight=0"
  [contrastive_s1]="+experiment=contrastive_smollm2 seed=1"
  [lm_only_s1]="+experiment=contrastive_smollm2 seed=1 algo.contrastive_weight=0"
  # the same pair with the LM loss also on the injected rows (itself a robustness objective)
  [contrastive_lminj_s0]="+experiment=contrastive_smollm2 seed=0 algo.lm_on_injected=true"
  [lm_only_lminj_s0]="+experiment=contrastive_smollm2 seed=0 algo.lm_on_injected=true algo.contrastive_weight=0"
  # dose: a tenth of the contrastive weight (between contrastive_s0 and lm_only_s0)
  [contrastive_w01_s0]="+experiment=contrastive_smollm2 seed=0 algo.contrastive_weight=0.1"
)
ORDER=(base contrastive_s0 lm_only_s0 contrastive_s1 lm_only_s1 contrastive_lminj_s0 lm_only_lminj_s0 contrastive_w01_s0)

run_listed "${@:-${ORDER[@]}}"
