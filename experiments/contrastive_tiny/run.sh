#!/usr/bin/env bash
# Tiny prompt-injection experiment on CPU: a deliberately vulnerable start, then contrastive+LM vs LM-only.
#   bash experiments/contrastive_tiny/run.sh [out_dir]        (from the repo root)
set -euo pipefail
OUT=${1:-runs/contrastive_tiny}
export OMP_NUM_THREADS=1   # tiny models: one thread is fastest on a shared machine
COMMON=(algo=contrastive data=contrastive_injection model=tiny_llama
        "model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head]"
        model.lora.r=16 model.lora.alpha=32 trainer.lr=6e-3 trainer.per_device_batch_size=8
        trainer.progress_bar=false)
# 0) the "before" model: follows instructions found in data (injected rows labelled with the witness),
#    trained on every attack template — a stand-in for an instruction-tuned model that is vulnerable.
python train.py "${COMMON[@]}" data.params.injected_target=witness data.params.train_templates=all \
  algo.contrastive_weight=0 data.num_train=4000 data.num_eval=100 trainer.max_steps=500 trainer.save_steps=250 \
  hydra.run.dir="$OUT/vulnerable"
START="$OUT/vulnerable/checkpoints/checkpoint-500"
# 1) contrastive + LM from that start; training templates only (held-out ones are for evaluation)
python train.py "${COMMON[@]}" algo.init_from="$START" data.num_train=2400 data.num_eval=200 trainer.max_steps=300 \
  hydra.run.dir="$OUT/contrastive"
# 2) ablation: the same with the contrastive term off
python train.py "${COMMON[@]}" algo.init_from="$START" algo.contrastive_weight=0 data.num_train=2400 data.num_eval=200 \
  trainer.max_steps=300 hydra.run.dir="$OUT/lm_only"
python experiments/contrastive_tiny/table.py "$OUT"
python experiments/contrastive_tiny/probe_repr.py "$OUT"                 # writes $OUT/<run>/probe.json
python experiments/contrastive_tiny/report.py --collect "$OUT" > /dev/null  # -> results/metrics.csv, report.md
