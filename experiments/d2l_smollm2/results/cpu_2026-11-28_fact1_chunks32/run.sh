#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/cpu_2026-11-28_fact1_chunks32/run.sh   (2026-11-28, CPU, ~2 hours)
# 8x the window on this CPU: the arm fact1_chunks32 (gpu_scale.py: one-fact documents among filler up to 3,968 tokens,
# 1-32 chunks), each seed continued from its own H200 fact1_chunks hypernet (the ignored
# .gpu/2026-11-28_fact1_chunks{,_s1,_s2}_hypernet, trained on up to 8 chunks; rebuilt by
# `../gpu_2026-11-28_h200/run.sh train keep`) for 64 steps of batch 8 (512 documents,
# a cosine from lr 1e-3, fp32, ~31 s per step), evaluated on the 48 held-out documents as they are (end of run) and
# at 8x the 512-token window (4,096 tokens; ~7 min a seed) and 4x (~5 min); the baselines that read no hypernet are those of the 48-document
# runs (gpu_seeds_2026-11-27_h200/cpu_baselines), paired by report.py.
set -eu
cd "$(git rev-parse --show-toplevel)"
HERE=experiments/d2l_smollm2/results/cpu_2026-11-28_fact1_chunks32
BASE=experiments/d2l_smollm2/results/gpu_seeds_2026-11-27_h200/cpu_baselines
OUT=${OUT:-/tmp/c32}
ARM="+experiment=d2l_smollm2 algo.kl_coef=0 algo.monitor_steps=0 ++data.params.num_facts=1 ++data.params.single_hop=1
  ++data.params.two_hop=0 data.params.train_doc_tokens=3968 data.num_eval=48 data.num_train=512"
for s in 0 1 2; do
    suf=$([ "$s" = 0 ] && echo "" || echo "_s$s")
    OMP_NUM_THREADS=2 python train.py $ARM seed=$s trainer.max_steps=64 trainer.logging_steps=4 \
        algo.init_hypernet="$PWD/.gpu/2026-11-28_fact1_chunks${suf}_hypernet" "algo.eval_conditions=[d2l,d2l_other_doc]" \
        hydra.run.dir="$OUT/s$s"
    for k in 8 4; do
        OMP_NUM_THREADS=2 python train.py $ARM seed=$s mode=eval eval.checkpoint="$OUT/s$s/checkpoints/checkpoint-64" \
            ++data.params.eval_doc_tokens=$((512 * k)) "algo.eval_conditions=[d2l,d2l_other_doc]" \
            hydra.run.dir="$OUT/s${s}_x$k"
    done
done
for run in "$OUT"/s?{,_x4,_x8}; do
    mkdir -p "$HERE/${run##*/}" && cp "$run"/{config.yaml,eval.json,summary.json} "$HERE/${run##*/}/"
    if [ -f "$run/metrics.jsonl" ]; then cp "$run/metrics.jsonl" "$HERE/${run##*/}/"; fi
done
python experiments/d2l_smollm2/report.py --results "$HERE" \
    --rows facts:no_context,in_context,cd=experiments/d2l_smollm2/results/probes/cd_one_fact_48docs/eval.json \
    --rows x4:no_context,in_context_truncated="$BASE/x4_48docs/eval.json" --rows x4:in_context="$BASE/x4_full_48docs/eval.json" \
    --rows x8:no_context,in_context_truncated="$BASE/x8_48docs/eval.json" --rows x8:in_context="$BASE/x8_full_48docs/eval.json" \
    --note "D2L: fact1_chunks32, 64 CPU steps from the H200's fact1_chunks hypernets; run.sh beside it"
