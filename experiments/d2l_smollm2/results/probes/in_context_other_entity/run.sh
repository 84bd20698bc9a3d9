# The in-context reference for the binding control (2026-11-28, CPU, one thread each, one after another):
# SmolLM2-135M-Instruct reading a held-out document, asked about its own entity and about another document's.
# Run from the repository root: bash experiments/d2l_smollm2/results/probes/in_context_other_entity/run.sh
P="seed=0 data.params.train_doc_tokens=0 algo.kl_coef=0 algo.encoder.chunking=sentences algo.encoder.max_doc_length=32 mode=eval eval.checkpoint=init"
C="algo.eval_conditions=[no_context,in_context,in_context_other_entity]"
export OMP_NUM_THREADS=1
python train.py +experiment=d2l_smollm2 $P data.num_train=8000 ++data.params.two_hop=0 ++data.params.num_facts=1 \
  ++data.params.single_hop=1 "$C" hydra.run.dir=/tmp/ic/fact1
python train.py +experiment=d2l_smollm2 $P data.num_train=8000 ++data.params.two_hop=0 ++data.params.num_facts=3 \
  ++data.params.single_hop=3 "$C" hydra.run.dir=/tmp/ic/facts3
python train.py +experiment=d2l_smollm2 $P data.num_train=8000 "$C" hydra.run.dir=/tmp/ic/facts9
