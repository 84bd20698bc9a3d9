#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/cpu_2026-11-28_facts3_from_fact1_chunks/more_steps/run.sh   (CPU, ~35 min)
# The three hypernets of ../run.sh (500 steps on 3-fact documents) trained 300 steps more, each from its own, with a
# fresh cosine from lr 1e-3 (`algo.init_hypernet`: weights only) on 8,000 documents (the first 4,000 those of
# ../run.sh), then evaluated on the same 48 held-out 3-fact documents; report.py pairs them with in context and CD.
set -eu
cd "$(git rev-parse --show-toplevel)"
HERE=experiments/d2l_smollm2/results/cpu_2026-11-28_facts3_from_fact1_chunks/more_steps
OUT=${OUT:-/tmp/f3c}
ARM="+experiment=d2l_smollm2 algo.kl_coef=0 algo.monitor_steps=0 ++data.params.num_facts=3 ++data.params.single_hop=3
  ++data.params.two_hop=0 data.params.train_doc_tokens=0 data.num_eval=48 data.num_train=8000
  algo.encoder.chunking=sentences algo.encoder.max_doc_length=128"
for s in 0 1 2; do
    OMP_NUM_THREADS=2 /usr/bin/time -v -o "$OUT/time_more_s$s.txt" python train.py $ARM seed=$s trainer.max_steps=300 \
        trainer.logging_steps=10 trainer.progress_bar=false \
        algo.init_hypernet="$OUT/s$s/checkpoints/checkpoint-500" \
        "algo.eval_conditions=[d2l,d2l_other_doc]" hydra.run.dir="$OUT/more_s$s"
done
for s in 0 1 2; do
    mkdir -p "$HERE/s$s" && cp "$OUT/more_s$s"/{config.yaml,eval.json,summary.json,metrics.jsonl} "$HERE/s$s/"
    cp "$OUT/time_more_s$s.txt" "$HERE/s$s/time_v.txt"
done
python experiments/d2l_smollm2/report.py --results "$HERE" \
    --rows in_context,cd=experiments/d2l_smollm2/results/probes/cd_three_facts_48docs/eval.json \
    --note "D2L: 500 + 300 CPU steps on 3-fact documents from the H200's fact1_chunks hypernets; run.sh beside it"
