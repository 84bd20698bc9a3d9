"""RLVR datasets: offline generators and loaders for the real sets, one schema.

* ``generate_ifeval(n, seed)``: IFEval-style prompts composing 1-3 constraints
  (columns ``prompt``, ``instruction_id_list``, ``kwargs``, ``key``).
* ``generate_arithmetic(n, seed)``: arithmetic word problems (``prompt``, ``answer``).
* ``generate_addition(n, seed, split)``: "What is a + b?" with operand ranges and a disjoint held-out split.
* ``load_gsm8k`` / ``load_ifeval`` / ``load_rlvr_ifeval`` / ``load_rlvr``: ``openai/gsm8k``,
  ``google/IFEval``, ``allenai/RLVR-IFeval`` by hub name or from a local file in that schema.
* ``GOOGLE_IFEVAL``: Google's 541 IFEval prompts, shipped (``load_ifeval(str(GOOGLE_IFEVAL))`` reads them offline;
  Apache-2.0, from google-research/instruction_following_eval/data/input_data.jsonl: see NOTICE beside it).

The reward columns match ``posttrain.rewards`` (``math`` reads ``answer``; ``ifeval_strict``/
``ifeval_loose`` read ``instruction_id_list`` and ``kwargs``).
"""

from pathlib import Path

from posttrain.data.rlvr.add import generate_addition
from posttrain.data.rlvr.arith import generate_arithmetic
from posttrain.data.rlvr.ifeval_gen import generate_ifeval
from posttrain.data.rlvr.loaders import load_gsm8k, load_ifeval, load_rlvr, load_rlvr_ifeval

GOOGLE_IFEVAL = Path(__file__).parent / "google_ifeval" / "input_data.jsonl"

__all__ = [
    "GOOGLE_IFEVAL",
    "generate_addition",
    "generate_arithmetic",
    "generate_ifeval",
    "load_gsm8k",
    "load_ifeval",
    "load_rlvr",
    "load_rlvr_ifeval",
]
