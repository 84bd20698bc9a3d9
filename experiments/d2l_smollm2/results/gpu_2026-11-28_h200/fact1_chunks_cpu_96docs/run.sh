#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/gpu_2026-11-28_h200/fact1_chunks_cpu_96docs/run.sh BUNDLE   (2026-11-28, CPU)
# 2x the window on 96 held-out documents: the 48 of fact1_chunks_cpu and the next 48 of the same generator (its
# first 48 reproduce fact1_chunks_cpu/s<seed>_x2 to the last response). BUNDLE holds the H200's fact1_chunks{,_s1,_s2}
# hypernets (this checkout's ignored .gpu/2026-11-28_fact1_chunks*_hypernet, renamed as gpu_scale.py names them).
# D2L at three seeds (6 min each here), then the baselines that read no hypernet (once; report.py pairs them).
set -eu
cd "$(git rev-parse --show-toplevel)"
HERE=experiments/d2l_smollm2/results/gpu_2026-11-28_h200/fact1_chunks_cpu_96docs
BASE=experiments/d2l_smollm2/results/gpu_seeds_2026-11-27_h200/cpu_baselines/x2_96docs
python experiments/d2l_smollm2/gpu_bundle.py evaluate "$1" /tmp/res96 --eval-tokens 1024 --eval-docs 96
cp -r /tmp/res96/fact1_chunks_cpu/s*_x2 "$HERE"/
OMP_NUM_THREADS=2 python train.py +experiment=d2l_smollm2 hw=cpu algo.kl_coef=0 data.num_train=30000 \
    ++data.params.num_facts=1 ++data.params.single_hop=1 ++data.params.two_hop=0 data.params.train_doc_tokens=1024 \
    mode=eval eval.checkpoint=init data.num_eval=96 trainer.progress_bar=false ++data.params.eval_doc_tokens=1024 \
    "algo.eval_conditions=[no_context,in_context,in_context_truncated]" hydra.run.dir="$BASE"
R="--rows x2:no_context,in_context,in_context_truncated=$BASE/eval.json"
python experiments/d2l_smollm2/report.py --results "$HERE" $R                                   # all 96 documents
python experiments/d2l_smollm2/report.py --results "$HERE" $R --docs 48:96 --out "$HERE/docs48_96"  # the new 48 alone
