"""CD on the first 16 of the 48 held-out 9-fact documents beside in context and the stage-3 hypernet, same questions.

Run from the repository root: python experiments/d2l_smollm2/results/probes/cd_nine_facts_16docs/compare_first16.py
"""

import json
from pathlib import Path

from posttrain.analysis.stats import bootstrap_ci

R = Path("experiments/d2l_smollm2/results/probes")
RUNS = {
    "in context": (R / "in_context_other_entity/facts9/eval.json", "in_context"),
    "CD": (R / "cd_nine_facts_16docs/eval.json", "cd"),
    "D2L stage 3": (R / "curriculum_fact1_then_facts3/stage3_facts9_500steps/eval.json", "d2l"),
}
rows = {name: (json.loads(path.read_text())["per_question"], cond) for name, (path, cond) in RUNS.items()}
questions = [[r["question"] for r in per] for per, _ in rows.values()]
assert all(q == questions[0] for q in questions), "the runs were evaluated on different questions"
cd_rows = rows["CD"][0]
items = [j for j, r in enumerate(cd_rows) if "cd" in r]
docs = [cd_rows[j]["doc"] for j in items]


def mean(name: str, js: list[int]) -> float:
    per, cond = rows[name]
    return sum(float(per[j][cond]["correct"]) for j in js) / len(js)


for name, (per, cond) in rows.items():
    v = [float(per[j][cond]["correct"]) for j in items]
    ci = bootstrap_ci(v, [1.0] * len(v), clusters=docs)
    print(f"{name}: {len(v)} questions, {len(set(docs))} documents, {mean(name, items):.3f} [{ci[0]:.3f}, {ci[1]:.3f}]")
print("by kind (questions; in context, CD, D2L):")
for kind in sorted({cd_rows[j]["kind"] for j in items}):
    js = [j for j in items if cd_rows[j]["kind"] == kind]
    print(kind, len(js), *(f"{mean(name, js):.3f}" for name in rows))
for hops in (1, 2):
    js = [j for j in items if cd_rows[j]["hops"] == hops]
    print(f"{hops}-fact questions", len(js), *(f"{mean(name, js):.3f}" for name in rows))
