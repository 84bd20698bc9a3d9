#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/gpu_2026-11-28_h200/fact1_chunks_cpu_96docs/run.sh BUNDLE   (2026-11-28, CPU)
# 2x and 4x the window on 96 held-out documents: the 48 of fact1_chunks_cpu and the next 48 of the same generator
# (its first 48 reproduce fact1_chunks_cpu/s<seed>_x2 and _x4 to the last response). BUNDLE holds the H200's
# fact1_chunks{,_s1,_s2}_hypernet, named as gpu_scale.py names them (.gpu/2026-11-28_d2l_scale, which
# `../run.sh train keep` rebuilds). D2L at three seeds (6 and 9 min each here), then the baselines that read no hypernet
# (once, 14 min at each length; report.py pairs them with every seed).
set -eu
cd "$(git rev-parse --show-toplevel)"
HERE=experiments/d2l_smollm2/results/gpu_2026-11-28_h200/fact1_chunks_cpu_96docs
BASE=experiments/d2l_smollm2/results/gpu_seeds_2026-11-27_h200/cpu_baselines
python experiments/d2l_smollm2/gpu_bundle.py evaluate "$1" /tmp/res96 --eval-tokens 1024,2048 --eval-docs 96
cp -r /tmp/res96/fact1_chunks_cpu/s*_x[24] "$HERE"/
base() {  # base TOKENS NAME CONDITIONS
    OMP_NUM_THREADS=2 python train.py +experiment=d2l_smollm2 hw=cpu algo.kl_coef=0 data.num_train=30000 \
        ++data.params.num_facts=1 ++data.params.single_hop=1 ++data.params.two_hop=0 \
        data.params.train_doc_tokens=1024 mode=eval eval.checkpoint=init data.num_eval=96 trainer.progress_bar=false \
        ++data.params.eval_doc_tokens="$1" "algo.eval_conditions=[$3]" hydra.run.dir="$BASE/$2"
}
base 1024 x2_96docs no_context,in_context,in_context_truncated
base 2048 x4_96docs no_context,in_context_truncated
R="--rows x2:no_context,in_context,in_context_truncated=$BASE/x2_96docs/eval.json"
R="$R --rows x4:no_context,in_context_truncated=$BASE/x4_96docs/eval.json"
python experiments/d2l_smollm2/report.py --results "$HERE" $R                                      # all 96 documents
python experiments/d2l_smollm2/report.py --results "$HERE" $R --docs 48:96 --out "$HERE/docs48_96"  # the new 48 alone
