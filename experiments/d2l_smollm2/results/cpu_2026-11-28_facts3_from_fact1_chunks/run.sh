#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/cpu_2026-11-28_facts3_from_fact1_chunks/run.sh   (CPU, ~5.6 hours: stages 1-3, 5, 6)
# STAGES="1 2" ran 2026-11-28 (~1.5 hours); STAGES=3 2026-11-29 (~1.7 hours: from stage 2's hypernets, which this
# checkout keeps in .gpu/2026-11-28_facts3_from_fact1_chunks{,_s1,_s2}_hypernet); STAGES=4 2026-11-29 (~21 min: a
# probe that lost ground, not in the default); STAGES="5 6" 2026-11-29 (~2.4 hours: stage 5 then read stage 3's
# hypernets from the .gpu copies named below, byte-identical to the checkpoints it now links).
# Several-fact documents from hypernets that write one fact: each seed's H200 fact1_chunks hypernet (the ignored
# .gpu/2026-11-28_fact1_chunks{,_s1,_s2}_hypernet, rebuilt by `../gpu_2026-11-28_h200/run.sh train keep`; on a
# 3-fact document's answer sentence alone it scores 0.407, the curriculum's stage-2 hypernets 0.069:
# results/probes/evidence_only) trained 500 steps of batch 8 on
# 3-fact documents read one sentence per chunk (4,000 documents, 12,000 questions, a cosine from lr 1e-3, fp32,
# ~1.9 s per step) -> s<seed>/; then each from its own 300 steps more (a fresh cosine from lr 1e-3, 8,000 documents,
# the first 4,000 the same) -> more_steps/s<seed>/. Evaluated on the 48 held-out 3-fact documents after each; in
# context and context distillation read no hypernet: their rows are results/probes/cd_three_facts_48docs's, paired
# by report.py. Third stage (2026-11-29): each seed's 800-step hypernet 1,000 steps more (a fresh cosine from lr 1e-3, 16,000
# documents, the first 8,000 the same: mostly documents it has not seen; a checkpoint every 250 steps) -> longer/s<seed>/. Fourth: 250 steps more from
# each seed's third-stage hypernet, the same 16,000 documents -> longer/more/s<seed>/. Fifth (2026-11-29, STAGES=5,
# ~1.2 hours): each seed's third-stage hypernet (also kept in .gpu/2026-11-29_facts3_longer{,_s1,_s2}_hypernet) 1,000 steps
# more on 16,000 documents it has not read (data.params.train_skip=16000) -> longer/unseen/s<seed>/. Sixth (2026-11-29, STAGES=6,
# ~1.2 hours): 1,000 steps more from each fifth-stage hypernet, on the next 16,000 (train_skip=32000) ->
# longer/unseen/more/s<seed>/.
set -eu
cd "$(git rev-parse --show-toplevel)"
HERE=experiments/d2l_smollm2/results/cpu_2026-11-28_facts3_from_fact1_chunks
OUT=${OUT:-/tmp/f3c}
ARM="+experiment=d2l_smollm2 algo.kl_coef=0 algo.monitor_steps=0 ++data.params.num_facts=3 ++data.params.single_hop=3
  ++data.params.two_hop=0 data.params.train_doc_tokens=0 data.num_eval=48 algo.encoder.chunking=sentences
  algo.encoder.max_doc_length=128 trainer.logging_steps=10 trainer.progress_bar=false"
STAGES=${STAGES:-1 2 3 5 6}
mkdir -p "$OUT"

stage() {  # stage <run prefix> <results folder> <steps> <documents> <init of seed s, with {s}> <note>
    local prefix=$1 here=$2 steps=$3 docs=$4 init=$5 note=$6 s
    for s in 0 1 2; do
        local suf; suf=$([ "$s" = 0 ] && echo "" || echo "_s$s")
        OMP_NUM_THREADS=2 /usr/bin/time -v -o "$OUT/time_${prefix}s$s.txt" python train.py $ARM seed=$s \
            trainer.max_steps="$steps" data.num_train="$docs" algo.init_hypernet="${init//\{s\}/$suf}" \
            "algo.eval_conditions=[d2l,d2l_other_doc]" ${EXTRA:-} hydra.run.dir="$OUT/${prefix}s$s"
        mkdir -p "$here/s$s" && cp "$OUT/${prefix}s$s"/{config.yaml,eval.json,summary.json,metrics.jsonl} "$here/s$s/"
        cp "$OUT/time_${prefix}s$s.txt" "$here/s$s/time_v.txt"
    done
    python experiments/d2l_smollm2/report.py --results "$here" \
        --rows in_context,cd=experiments/d2l_smollm2/results/probes/cd_three_facts_48docs/eval.json --note "$note"
}

has() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
link() {  # link <run prefix> <checkpoint step> <link prefix>: each seed's next stage reads its own hypernet
    local s suf
    for s in 0 1 2; do
        suf=$([ "$s" = 0 ] && echo "" || echo "_s$s")
        ln -sfn "$OUT/$1s$s/checkpoints/checkpoint-$2" "$OUT/$3${suf}_hypernet"
    done
}

if has 1; then
    stage "" "$HERE" 500 4000 "$PWD/.gpu/2026-11-28_fact1_chunks{s}_hypernet" \
        "D2L: 500 CPU steps on 3-fact documents from the H200's fact1_chunks hypernets; run.sh beside it"
fi
if has 2; then
    link "" 500 stage1
    stage more_ "$HERE/more_steps" 300 8000 "$OUT/stage1{s}_hypernet" \
        "D2L: 500 + 300 CPU steps on 3-fact documents from the H200's fact1_chunks hypernets; ../run.sh"
fi
if has 3; then
    link more_ 300 stage2
    EXTRA=trainer.save_steps=250 stage longer_ "$HERE/longer" 1000 16000 "$OUT/stage2{s}_hypernet" \
        "D2L: 500 + 300 + 1,000 CPU steps on 3-fact documents from the H200's fact1_chunks hypernets; ../run.sh"
fi
if has 4; then
    link longer_ 1000 stage3
    stage longer_more_ "$HERE/longer/more" 250 16000 "$OUT/stage3{s}_hypernet" \
        "D2L: 500 + 300 + 1,000 + 250 CPU steps on 3-fact documents from the H200's fact1_chunks hypernets; ../../run.sh"
fi
if has 5; then
    link longer_ 1000 stage3
    EXTRA="++data.params.train_skip=16000 trainer.save_steps=250" stage unseen_ "$HERE/longer/unseen" 1000 16000 \
        "$OUT/stage3{s}_hypernet" \
        "D2L: 500 + 300 + 1,000 CPU steps, then 1,000 on unseen 3-fact documents, from the H200's fact1_chunks hypernets; ../../run.sh"
fi
if has 6; then
    link unseen_ 1000 stage5
    EXTRA="++data.params.train_skip=32000 trainer.save_steps=250" stage unseen_more_ "$HERE/longer/unseen/more" 1000 \
        16000 "$OUT/stage5{s}_hypernet" \
        "D2L: 500 + 300 + 1,000 CPU steps, then 2 x 1,000 on unseen 3-fact documents, from the H200's fact1_chunks hypernets; ../../../run.sh"
fi
