#!/usr/bin/env bash
# Prompt-injection robustness arms on SmolLM2-135M-Instruct, SecAlign-style data, CPU, one run at a time (from the
# repo root, after `make setup`):
#   bash experiments/contrastive_smollm2/run.sh                    # every run below, in order (base, then arm x seed)
#   bash experiments/contrastive_smollm2/run.sh base sft_inv_s0    # some of them
#   SCALE=tiny bash experiments/contrastive_smollm2/run.sh         # the same commands on model=tiny_llama, 2 steps
#                                                                  # (plumbing check: runs/ and results/ under $OUT)
#   SPLIT=test bash experiments/contrastive_smollm2/run.sh base sft_s100 ...   # issue 62's test split, seeds 100-102:
#       100 new task instances x 5 families (one position each), Google's 541 IFEval prompts -> results/test/<name>/
# Each run writes $OUT/<name>/ and copies its small files (summary.json, config.yaml, metrics.jsonl, eval_*.jsonl,
# ifeval_*.jsonl, time_v.txt, loadavg.txt) to $RES/<name>/ (git-ignored). Then:
#   python experiments/contrastive_smollm2/report.py --collect    # -> results/*.csv (tracked), results/report.md
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
SCALE=${SCALE:-full}
if [ "$SCALE" = tiny ]; then
  OUT=${OUT:-runs/contrastive_smollm2_tiny}
  RES=${RES:-$OUT/results}
  EXTRA="model=tiny_llama trainer.max_steps=2 trainer.save_steps=2 data.num_train=8 data.num_eval=1
         data.params.num_ifeval=2 algo.max_new_tokens=4 algo.ifeval_max_new_tokens=4 algo.head_hidden_dim=32
         algo.proj_dim=16 trainer.lr=1e-2 algo.max_length=384"
elif [ "${SPLIT:-eval}" = test ]; then  # issue 62's untouched test split, scored once, fresh seeds
  OUT=${OUT:-runs/contrastive_smollm2_test}
  RES=${RES:-experiments/contrastive_smollm2/results/test}
  EXTRA="data.params.eval_split=test data.num_eval=100 data.params.eval_families=[ignore,completion,escape,combined,chat]
         data.params.eval_injected_tasks=[capital,translate,sum] data.params.ifeval_source=google data.params.num_ifeval=541"
  SEEDS=${SEEDS:-"100 101 102"}
else
  OUT=${OUT:-runs/contrastive_smollm2}
  RES=${RES:-experiments/contrastive_smollm2/results/secalign}
  EXTRA=""
fi
KEEP="summary.json config.yaml metrics.jsonl eval_after.jsonl eval_init.jsonl ifeval_after.jsonl ifeval_init.jsonl"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}   # on a shared 2-core machine one thread is the fastest
export HF_HUB_OFFLINE=1
# shellcheck source=experiments/run_one.sh
source experiments/run_one.sh
SEEDS=${SEEDS:-"0 1 2"}

# the arms: algo.* overrides of the preset (conf/experiment/contrastive_smollm2.yaml = SFT + invariance, no KL)
declare -A ARMS=(
  # StruQ-style SFT: the benign answer on injected inputs (the shifted LM loss on the injected rows), nothing else
  [sft]="algo.contrastive_weight=0 algo.consistency_weight=0"
  # + invariance: the injected prompt's answer state pulled to its benign version's, + output consistency (KL)
  [sft_inv]="algo.consistency_weight=1"
  # SecAlign-style DPO (TRL's DPOTrainer): benign answer over the injected task's answer, on the injected prompt
  [dpo]="algo.preference=dpo algo.lm_weight=0 algo.contrastive_weight=0 algo.consistency_weight=0"
  [dpo_inv]="algo.preference=dpo algo.lm_weight=0 algo.consistency_weight=1"
  # the invariance term alone, without the output-consistency KL, which cost IFEval (the preset since 2026-11-26)
  [sft_inv_nokl]=""
  [dpo_inv_nokl]="algo.preference=dpo algo.lm_weight=0"
  # under DPO (no LM loss) the invariance term at weight 1 cost IFEval even without the KL: at 0.1
  [dpo_inv_w01]="algo.preference=dpo algo.lm_weight=0 algo.contrastive_weight=0.1"
  # issue 62's matched-supervision control: SFT with the LM loss on every row the invariance term reads that has an
  # answer (benign, paraphrase, injected), so a gain of the preset over it is not more supervised rows
  [sft_matched]="algo.contrastive_weight=0 algo.consistency_weight=0 algo.lm_on_counterfactual=true"
  # issue 62: the request in the user turn and the data in a turn of its own (input_role), in training and evaluation
  [sft_roles]="algo.contrastive_weight=0 algo.consistency_weight=0 data.params.layout=input_role"
  [sft_inv_nokl_roles]="data.params.layout=input_role"
)
ARM_ORDER=(sft sft_inv dpo dpo_inv sft_inv_nokl dpo_inv_nokl dpo_inv_w01 sft_matched sft_roles sft_inv_nokl_roles)

declare -A RUNS=(
  # the starting weights, scored once on the same eval items as every arm
  [base]="+experiment=contrastive_smollm2 mode=eval eval.checkpoint=init $EXTRA"
)
ORDER=(base)
for seed in $SEEDS; do
  for arm in "${ARM_ORDER[@]}"; do
    RUNS[${arm}_s$seed]="+experiment=contrastive_smollm2 seed=$seed ${ARMS[$arm]} $EXTRA"
    ORDER+=("${arm}_s$seed")
  done
done

run_listed "${@:-${ORDER[@]}}"
