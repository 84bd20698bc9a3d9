#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/cpu_2026-12-03_baselines/run.sh [NAME...]   (2026-12-03, CPU, fp32)
# Issue 62's two baselines that read no hypernet, on the held-out documents the must-show rows were scored on:
# in_context_instructed (the document after an instruction to read it and answer) and retrieval_bm25 (the
# document's best BM25 sentences for the question, filling the 512-token window). report.py pairs each with every
# seed of D2L. fact1_cd300: context distillation at the D2L paper's 300 steps (the other CD rows ran 100) on the
# first 24 of the 48 one-fact documents (its CPU cost). Without NAMEs: every run, cheapest first (the whole 4x and
# 8x documents in context are the slow ones).
set -eu
cd "$(git rev-parse --show-toplevel)"
HERE=experiments/d2l_smollm2/results/cpu_2026-12-03_baselines
P="+experiment=d2l_smollm2 hw=cpu seed=0 ++data.params.two_hop=0 mode=eval eval.checkpoint=init trainer.progress_bar=false"
LONG="$P algo.kl_coef=0 data.num_train=30000 ++data.params.num_facts=1 ++data.params.single_hop=1 data.params.train_doc_tokens=1024"
run() {  # run NAME CONDITIONS OVERRIDES...
    local name=$1 conds=$2; shift 2
    [ -f "$HERE/$name/eval.json" ] && { echo "$name: done before"; return; }
    OMP_NUM_THREADS=${THREADS:-2} /usr/bin/time -v .venv/bin/python train.py "$@" "algo.eval_conditions=[$conds]" \
        hydra.run.dir="$HERE/$name" > "$HERE/$name.log" 2>&1
    echo "$name rc=$? $(date)"
}
declare -A ARGS=(
    [fact1]="$P data.params.train_doc_tokens=0 data.num_train=400 ++data.params.num_facts=1 ++data.params.single_hop=1"
    [facts3]="$P data.params.train_doc_tokens=0 data.num_train=8000 algo.kl_coef=0 algo.encoder.chunking=sentences algo.encoder.max_doc_length=32 algo.monitor_docs=16 ++data.params.num_facts=3 ++data.params.single_hop=3"
    [fact1_cd300]="$P data.params.train_doc_tokens=0 data.num_train=400 ++data.params.num_facts=1 ++data.params.single_hop=1 algo.baselines.cd_steps=300 algo.baselines.cd_max_docs=24"
    [x2_96docs]="$LONG data.num_eval=96 ++data.params.eval_doc_tokens=1024"
    [x4_96docs]="$LONG data.num_eval=96 ++data.params.eval_doc_tokens=2048"
    [x8_48docs]="$LONG data.num_eval=48 ++data.params.eval_doc_tokens=4096"
    [x4_48docs_instructed]="$LONG data.num_eval=48 ++data.params.eval_doc_tokens=2048"
    [x8_48docs_instructed]="$LONG data.num_eval=48 ++data.params.eval_doc_tokens=4096"
)
declare -A CONDS=(
    [fact1]=in_context_instructed,retrieval_bm25 [facts3]=in_context_instructed,retrieval_bm25
    [x2_96docs]=in_context_instructed,retrieval_bm25 [x4_96docs]=retrieval_bm25 [x8_48docs]=retrieval_bm25
    [x4_48docs_instructed]=in_context_instructed [x8_48docs_instructed]=in_context_instructed [fact1_cd300]=cd
)
ORDER="fact1 facts3 x2_96docs x4_96docs x8_48docs x4_48docs_instructed x8_48docs_instructed fact1_cd300"
for name in ${@:-$ORDER}; do
    # shellcheck disable=SC2086  # ARGS holds whitespace-separated overrides
    run "$name" "${CONDS[$name]}" ${ARGS[$name]}
done
