#!/usr/bin/env bash
# D2L on SmolLM2-135M-Instruct with open-answer documents and its baselines (issue 27), one run at a time (from the
# repo root, after `make setup`):
#   bash experiments/d2l_smollm2/run.sh                 # every run below, in order (per seed: train, then long docs)
#   bash experiments/d2l_smollm2/run.sh s0 s0_x8        # some of them (an s<seed>_x<k> run needs s<seed>'s checkpoint)
#   SEEDS="0" bash experiments/d2l_smollm2/run.sh       # other seeds (default: 0 1 2)
#   SCALE=tiny bash experiments/d2l_smollm2/run.sh      # the same commands on model=tiny_llama, a few steps (plumbing
#                                                       # check: runs/ and results/ under $OUT)
#   SCALE=gpu bash experiments/d2l_smollm2/run.sh       # SmolLM2's native 8192-token window on a CUDA device
# Runs:
#   s<seed>      trains the hypernet (conf/experiment/d2l_smollm2.yaml) and evaluates every condition on the 48
#                held-out documents (the 9 facts alone, ~130 tokens): eval.json
#   s<seed>_x<k> mode=eval of s<seed>'s last checkpoint on the same documents and questions among filler, k x the
#                window (512 tokens on CPU): the needle-in-a-haystack set, D2L reading ceil(k x 512 / 128) chunks
# Each run writes $OUT/<name>/ and copies its small files (eval.json, summary.json, config.yaml, metrics.jsonl,
# time_v.txt, loadavg.txt) to $RES/<name>/. Then: python experiments/d2l_smollm2/report.py --results $RES
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
SCALE=${SCALE:-full}
SEEDS=${SEEDS:-"0 1 2"}
MULTIPLES=${MULTIPLES:-"1 2 4 8"}
STEPS=600
LONG=""   # overrides of the long-document evaluations (beside data.params.eval_doc_tokens)
if [ "$SCALE" = tiny ]; then
  OUT=${OUT:-runs/d2l_smollm2_tiny}
  RES=${RES:-$OUT/results}
  WINDOW=256   # the tiny tokenizer spends a token per byte
  STEPS=4
  EXTRA="model=tiny_llama algo.layers=null data.num_train=8 data.num_eval=3 ++data.params.num_facts=4
         ++data.params.single_hop=2 algo.max_length=256 algo.max_new_tokens=4 algo.context_window=$WINDOW
         algo.encoder.max_doc_length=64 algo.encoder.max_chunks=32 data.params.train_doc_tokens=256
         algo.baselines.format_lora_steps=2 algo.baselines.cd_steps=2 algo.baselines.cd_max_docs=2
         trainer.logging_steps=1"
elif [ "$SCALE" = gpu ]; then
  OUT=${OUT:-runs/d2l_smollm2_gpu}
  RES=${RES:-experiments/d2l_smollm2/results/gpu}
  WINDOW=8192  # SmolLM2's native window: documents of 8x it (65,536 tokens) read in 32 chunks of 2,048
  EXTRA="hw=auto algo.context_window=null algo.encoder.max_doc_length=2048 algo.encoder.max_chunks=32
         data.params.train_doc_tokens=4096 algo.baselines.cd_steps=300 algo.baselines.cd_max_docs=0"
else
  OUT=${OUT:-runs/d2l_smollm2}
  RES=${RES:-experiments/d2l_smollm2/results/open_facts}
  WINDOW=512
  EXTRA=""
  # the first 16 of the 48 held-out documents (64 questions), CD on the first 8 of them: on a CPU the full
  # in-context condition at 8x (4,096-token prompts) and CD's 100 steps per document are the slow parts
  LONG="data.num_eval=16 algo.baselines.cd_max_docs=8"
fi
KEEP="eval.json summary.json config.yaml metrics.jsonl"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}   # on a shared 2-core machine one thread per run is the fastest
export HF_HUB_OFFLINE=1
# shellcheck source=experiments/run_one.sh
source experiments/run_one.sh

declare -A RUNS=()
ORDER=()
for seed in $SEEDS; do
  # the teacher's top-k cache does not depend on the seed: the seeds share it
  RUNS[s$seed]="+experiment=d2l_smollm2 seed=$seed trainer.max_steps=$STEPS algo.kl_cache_dir=$OUT/teacher_cache $EXTRA"
  ORDER+=("s$seed")
  for k in $MULTIPLES; do
    # the format-only LoRA reads no document: its numbers are s<seed>'s at every length
    RUNS[s${seed}_x$k]="+experiment=d2l_smollm2 seed=$seed mode=eval trainer.max_steps=$STEPS $EXTRA $LONG
      eval.checkpoint=$OUT/s$seed/checkpoints/checkpoint-$STEPS ++data.params.eval_doc_tokens=$((k * WINDOW))
      algo.baselines.format_lora_steps=0"
    ORDER+=("s${seed}_x$k")
  done
done

run_listed "${@:-${ORDER[@]}}"
