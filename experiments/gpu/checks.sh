#!/usr/bin/env bash
# bash experiments/gpu/checks.sh [NAME...]   (on one CUDA GPU: the checks of ../shared/GPU_CHECKS.md, issues 23, 57)
#
# Runs the GPU checks in priority order inside a wall-clock budget (CHECKS_BUDGET_S, default 470 s), so that a short
# device lease ends with the most important numbers rather than a killed run: a check is skipped when less time is
# left than it needs, and cut at its own limit. With NAMEs, only those checks run (e.g. `loss_2048 step`).
# Wheels in .whl/ (the packages a bare CUDA image lacks: GPU_CHECKS.md) are installed into /tmp/site first.
# Everything goes to $OUT (default experiments/gpu/results/latest): log.txt (every command and its output) and
# results.jsonl (the JSON lines the benches print, each tagged with its check's name).
# Models are random-init at SmolLM2-135M's full shape (`model.tiny=true`): the real weights (89 MB) do not travel.
set -u
OUT=${OUT:-experiments/gpu/results/latest}
BUDGET=${CHECKS_BUDGET_S:-470}
START=$(date +%s)
mkdir -p "$OUT"
LOG=$OUT/log.txt
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl >>"$LOG" 2>&1 || { echo "wheel install failed" | tee -a "$LOG"; exit 1; }
    export PYTHONPATH=/tmp/site:src:.
else
    export PYTHONPATH=src:.
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
TINY=(--set hw=h200 --set model.tiny=true)

check() {  # check NAME LIMIT_S CMD...
    local name=$1 limit=$2 left
    shift 2
    if [ ${#WANT[@]} -gt 0 ] && [[ " ${WANT[*]} " != *" $name "* ]]; then return; fi
    left=$((BUDGET - ($(date +%s) - START)))
    if [ "$left" -lt 25 ]; then
        echo "=== $name: SKIPPED (${left} s of the budget left)" | tee -a "$LOG"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name (limit ${limit} s, at $(($(date +%s) - START)) s): $*" | tee -a "$LOG"
    local t0=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$OUT/.cur" 2>&1
    local rc=$?
    cat "$OUT/.cur" >>"$LOG"
    grep '^{' "$OUT/.cur" | sed "s/^{/{\"check\": \"$name\", /" >>"$OUT/results.jsonl"
    echo "=== $name: rc=$rc in $(($(date +%s) - t0)) s" | tee -a "$LOG"
    tail -n 3 "$OUT/.cur" | cut -c1-400
    rm -f "$OUT/.cur"
}

WANT=("$@")
check env 20 bash -c "nvidia-smi -L; $PY -c 'import torch, triton, transformers, trl, peft, accelerate, datasets, pyarrow;
print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), triton.__version__, transformers.__version__,
trl.__version__, peft.__version__, accelerate.__version__, datasets.__version__, pyarrow.__version__)'; git log -1 --format=%h 2>/dev/null"
# issue 57 (GPU_CHECKS item 1): gpt-oss-20b's full shape, GRPO LoRA, experts native MXFP4 vs dequantized to bf16, native
# again as a 24 GiB (rtx4090) and a 40 GiB (a100_40gb) card, plain TRL on the dequantized model as the anchor
G20B=(experiments/gpt_oss_20b/run.py --warmup 1 --out "$OUT/gpt_oss_20b.csv")
check gpt_oss_native 240 $PY "${G20B[@]}" gpt_oss_20b_grpo_lora_cuda_native
check gpt_oss_dequantize 240 $PY "${G20B[@]}" gpt_oss_20b_grpo_lora_cuda_dequantize
check gpt_oss_native_24g 200 $PY "${G20B[@]}" --cuda-limit-gib 24 gpt_oss_20b_grpo_lora_cuda_native
check gpt_oss_native_40g 200 $PY "${G20B[@]}" --cuda-limit-gib 40 gpt_oss_20b_grpo_lora_cuda_native
check gpt_oss_trl 240 $PY -m posttrain.bench grpo_step --model gpt_oss --set model.tiny=true --set hw=h200 \
    --set model.mxfp4=dequantize --batch 8 --num-generations 4 --completion-length 64 --steps 3 --warmup 1 \
    --rounds 1 --paths trl,posttrain --variant native:model.mxfp4=native
check loss_2048 110 $PY -m posttrain.bench grpo_loss --device cuda --dtype bf16 --shape 2048,2880,201088 --rounds 1
check gen_check 110 $PY -m posttrain.bench generation "${TINY[@]}" --check
check step 200 $PY -m posttrain.bench grpo_step "${TINY[@]}" --steps 8 --warmup 3 --rounds 1 \
    --variant static:algo.generation.backend=static
check loss_8192 100 $PY -m posttrain.bench grpo_loss --device cuda --dtype bf16 --shape 8192,2880,201088 --rounds 1
check loss_llama 100 $PY -m posttrain.bench grpo_loss --device cuda --dtype bf16 --shape 8192,4096,128256 --rounds 1
check gen_256 100 $PY -m posttrain.bench generation "${TINY[@]}" --batch 256 --new-tokens 64 --repeats 2
check kernel_test 90 $PY -m pytest -q -x -p no:cacheprovider tests/kernels/test_fused_device.py
check grpo_gpt_oss 60 $PY train.py model=tiny_gpt_oss hw=h200 trainer.max_steps=3 kernels=fused \
    trainer.progress_bar=false
check d2l 60 $PY train.py model=tiny_llama algo=d2l hw=h200 trainer.max_steps=3 trainer.progress_bar=false
check contrastive 60 $PY train.py model=tiny_llama algo=contrastive hw=h200 trainer.max_steps=3 \
    trainer.progress_bar=false
echo "=== done in $(($(date +%s) - START)) s" | tee -a "$LOG"
