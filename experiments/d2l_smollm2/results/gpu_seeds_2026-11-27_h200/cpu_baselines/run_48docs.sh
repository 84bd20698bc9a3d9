#!/usr/bin/env bash
# bash experiments/d2l_smollm2/results/gpu_seeds_2026-11-27_h200/cpu_baselines/run_48docs.sh   (2026-11-27)
# CPU baselines on 48 held-out fact1_chunks documents at 2x, 4x, 8x the window (no hypernet read: mode=eval init)
cd "$(git rev-parse --show-toplevel)" && mkdir -p runs/base48
ARM="+experiment=d2l_smollm2 hw=cpu algo.kl_coef=0 data.num_train=30000 ++data.params.num_facts=1 ++data.params.single_hop=1 ++data.params.two_hop=0 data.params.train_doc_tokens=1024 mode=eval eval.checkpoint=init data.num_eval=48 trainer.progress_bar=false"
one() {  # one NAME TOKENS CONDITIONS [extra]
  local name=$1 tokens=$2 conds=$3; shift 3
  OMP_NUM_THREADS=2 /usr/bin/time -v .venv/bin/python train.py $ARM ++data.params.eval_doc_tokens=$tokens "algo.eval_conditions=[$conds]" "$@" hydra.run.dir=runs/base48/$name > runs/base48/$name.log 2>&1
  echo "$name rc=$? $(date)" >> runs/base48/done.txt
}
one x2 1024 no_context,in_context,in_context_truncated
one x4 2048 no_context,in_context_truncated
one x8 4096 no_context,in_context_truncated
one x2_cd 1024 cd algo.baselines.cd_max_docs=48
# 2026-11-28: the full document in context at 4x and 8x (10.5 and 25.5 minutes here; x4_full_48docs, x8_full_48docs)
one x4_full 2048 in_context
one x8_full 4096 in_context
# 2026-11-28 (evening): context distillation at 4x (32 min here; x4_cd_48docs)
one x4_cd 2048 cd algo.baselines.cd_max_docs=48
