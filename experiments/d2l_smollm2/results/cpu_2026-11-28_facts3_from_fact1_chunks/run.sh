#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/cpu_2026-11-28_facts3_from_fact1_chunks/run.sh   (2026-11-28, CPU, ~1 hour)
# Several-fact documents from hypernets that write one fact: each seed's H200 fact1_chunks hypernet (this checkout's
# ignored .gpu/2026-11-28_fact1_chunks{,_s1,_s2}_hypernet; on a 3-fact document's answer sentence alone it scores
# 0.407, the curriculum's stage-2 hypernets 0.069: results/probes/evidence_only) trained 500 steps of batch 8 on
# 3-fact documents read one sentence per chunk (4,000 documents, 12,000 questions, a cosine from lr 1e-3, fp32,
# ~1.9 s per step), then evaluated on the 48 held-out 3-fact documents. In context and context distillation do not
# read a hypernet: their rows are those of results/probes/cd_three_facts_48docs, paired by report.py.
set -eu
cd "$(git rev-parse --show-toplevel)"
HERE=experiments/d2l_smollm2/results/cpu_2026-11-28_facts3_from_fact1_chunks
OUT=${OUT:-/tmp/f3c}
ARM="+experiment=d2l_smollm2 algo.kl_coef=0 algo.monitor_steps=0 ++data.params.num_facts=3 ++data.params.single_hop=3
  ++data.params.two_hop=0 data.params.train_doc_tokens=0 data.num_eval=48 data.num_train=4000
  algo.encoder.chunking=sentences algo.encoder.max_doc_length=128"
for s in 0 1 2; do
    suf=$([ "$s" = 0 ] && echo "" || echo "_s$s")
    OMP_NUM_THREADS=2 /usr/bin/time -v -o "$OUT/time_s$s.txt" python train.py $ARM seed=$s trainer.max_steps=500 \
        trainer.logging_steps=10 trainer.progress_bar=false \
        algo.init_hypernet="$PWD/.gpu/2026-11-28_fact1_chunks${suf}_hypernet" \
        "algo.eval_conditions=[d2l,d2l_other_doc]" hydra.run.dir="$OUT/s$s"
done
for s in 0 1 2; do
    mkdir -p "$HERE/s$s" && cp "$OUT/s$s"/{config.yaml,eval.json,summary.json,metrics.jsonl} "$HERE/s$s/"
    cp "$OUT/time_s$s.txt" "$HERE/s$s/time_v.txt"
done
python experiments/d2l_smollm2/report.py --results "$HERE" \
    --rows in_context,cd=experiments/d2l_smollm2/results/probes/cd_three_facts_48docs/eval.json \
    --note "D2L: 500 CPU steps on 3-fact documents from the H200's fact1_chunks hypernets; run.sh beside it"
