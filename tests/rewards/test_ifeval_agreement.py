"""`follows` / `follows_loose` agree with the public IFEval reference implementation.

The fixture holds the reference's verdicts (lm-eval's copy of Google's IFEval, cross-checked
against if-verifiable's copy) for every instruction id on a pool of responses; regenerate it
with ``tests/rewards/fixtures/make_ifeval_reference.py`` (its docstring has the command).
The reference is not a dependency of this repo (lm-eval fetches NLTK's punkt model at import
and needs it to count sentences), so CI compares against its recorded word; where lm-eval and
the punkt model are installed, ``test_live_reference`` also compares live.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from posttrain.rewards.ifeval import INSTRUCTION_IDS, follows, follows_loose

FIXTURE = Path(__file__).parent / "fixtures" / "ifeval_reference.json"


@pytest.fixture(scope="module")
def reference():
    return json.loads(FIXTURE.read_text())


def test_fixture_covers_every_id_with_both_verdicts(reference):
    seen = collections.defaultdict(set)
    for iid, _kw, _ri, strict, _loose in reference["cases"]:
        seen[iid].add(strict)
    assert set(seen) == set(INSTRUCTION_IDS) and len(INSTRUCTION_IDS) == 25
    one_sided = {i: v for i, v in seen.items() if v != {True, False}}
    assert not one_sided, f"ids seen with one verdict only: {one_sided}"


@pytest.mark.parametrize("loose", [False, True], ids=["strict", "loose"])
def test_follows_agrees_with_reference(reference, loose):
    responses = reference["responses"]
    fn = follows_loose if loose else follows
    disagreements = []
    per_id = collections.Counter()
    for iid, kw, ridx, strict, loose_ref in reference["cases"]:
        expected = loose_ref if loose else strict
        per_id[iid] += 1
        got = fn(iid, kw, responses[ridx])
        if got != expected:
            disagreements.append((iid, kw, responses[ridx][:120], expected, got))
    assert len(reference["cases"]) >= 4000 and min(per_id.values()) >= 100
    assert not disagreements, f"{len(disagreements)} disagreements, first: {disagreements[:5]}"


def _live_reference():
    try:
        import nltk

        nltk.data.find("tokenizers/punkt_tab/english/")
    except (ImportError, LookupError):
        return None
    try:
        from lm_eval.tasks.ifeval import utils
    except ImportError:  # not installed; an installed lm-eval that fails to import is a failure, not a skip
        return None
    return utils


def test_live_reference(reference):
    ref = _live_reference()
    if ref is None:
        pytest.skip("lm-eval's IFEval and NLTK punkt_tab not installed (see make_ifeval_reference.py)")
    import langdetect

    langdetect.DetectorFactory.seed = 0
    responses = reference["responses"]
    bad = 0
    for iid, kw, ridx, _s, _l in reference["cases"][::7]:
        inp = ref.InputExample(key=0, instruction_id_list=[iid], prompt="p", kwargs=[kw])
        expected = ref.test_instruction_following_strict(inp, responses[ridx]).follow_instruction_list[0]
        bad += follows(iid, kw, responses[ridx]) != expected
    assert bad == 0


def test_the_shipped_google_prompts_are_the_541_and_every_one_is_scorable():
    """posttrain.data.rlvr.GOOGLE_IFEVAL: Google's 541 IFEval prompts (NOTICE beside them), read offline by
    load_ifeval; every instruction is one of the 25 ids and its kwargs are the checker's, so each prompt scores."""
    from posttrain.data.rlvr import GOOGLE_IFEVAL, load_ifeval
    from posttrain.rewards.ifeval import ifeval_metrics, verdicts

    rows = load_ifeval(str(GOOGLE_IFEVAL))
    assert len(rows) == 541 and len(set(rows["key"])) == 541 and rows[0]["key"] == 1000
    ids = [i for row in rows["instruction_id_list"] for i in row]
    assert set(ids) == set(INSTRUCTION_IDS) and len(ids) == 834  # IFEval's paper: 541 prompts, 834 instructions
    prompts = [p[-1]["content"] for p in rows["prompt"]]
    # a reply that repeats the prompt follows `combination:repeat_prompt` where that is the instruction
    first = verdicts(rows["instruction_id_list"][3], rows["kwargs"][3], prompts[3], prompts[3])
    assert rows["instruction_id_list"][3][0] == "combination:repeat_prompt" and first[0] is True
    scores = ifeval_metrics(rows["instruction_id_list"], rows["kwargs"], [""] * 541, prompts)
    assert scores["prompt_level_strict_acc"] == 0.0  # an empty reply follows nothing
