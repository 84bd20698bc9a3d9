#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/probes/facts3_from_fact1_chunks_120steps/run.sh  (2026-11-28, CPU, 2 x ~6 min)
# Seed 0 H200 fact1_chunks hypernet, 120 steps on 3-fact documents: one 128-token chunk vs one sentence per chunk.
set -eu
cd "$(git rev-parse --show-toplevel)"
ARM="+experiment=d2l_smollm2 algo.kl_coef=0 algo.monitor_steps=0 ++data.params.num_facts=3 ++data.params.single_hop=3
  ++data.params.two_hop=0 data.params.train_doc_tokens=0 data.num_eval=48 data.num_train=2000 algo.encoder.max_doc_length=128"
for ch in tokens sentences; do
  OMP_NUM_THREADS=2 /usr/bin/time -v python train.py $ARM seed=0 algo.encoder.chunking=$ch trainer.max_steps=120 \
    trainer.logging_steps=10 algo.init_hypernet="$PWD/.gpu/2026-11-28_fact1_chunks_hypernet" \
    "algo.eval_conditions=[d2l]" trainer.progress_bar=false hydra.run.dir=/tmp/ab/$ch > /tmp/ab_$ch.log 2>&1
done
