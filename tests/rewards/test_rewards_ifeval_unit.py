"""Unit tests for the IFEval checkers, follows/follows_loose and the fraction rewards."""

from __future__ import annotations

import pytest

from posttrain.rewards import ifeval
from posttrain.rewards.ifeval import (
    follows,
    follows_loose,
    fraction_followed,
    ifeval_loose,
    ifeval_metrics,
    ifeval_strict,
    verdicts,
    verdicts_by_instruction,
)
from posttrain.rewards.ifeval_checks import INSTRUCTIONS, compare
from posttrain.rewards.text import count_sentences, word_tokenize


def test_registry_has_the_25_ifeval_ids():
    assert len(ifeval.INSTRUCTION_IDS) == 25
    assert {
        "keywords:existence",
        "length_constraints:number_words",
        "detectable_format:json_format",
        "change_case:capital_word_frequency",
        "startend:quotation",
    } <= set(ifeval.INSTRUCTION_IDS)
    # kwargs names as in Google's registry
    assert INSTRUCTIONS["keywords:letter_frequency"][1] == ("letter", "let_frequency", "let_relation")
    assert INSTRUCTIONS["detectable_format:multiple_sections"][1] == ("section_spliter", "num_sections")


def test_completion_and_prompt_text():
    from posttrain.rewards.text import completion_text, prompt_text

    assert completion_text("plain") == "plain"
    turns = [
        {"role": "assistant", "content": "call tool"},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "It is 42."},
    ]
    assert completion_text(turns) == "It is 42."
    assert completion_text([{"role": "assistant", "content": None}]) == ""
    assert (
        prompt_text(
            [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u1"},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": "u2"},
            ]
        )
        == "u2"
    )
    assert prompt_text("p") == "p" and prompt_text(None) is None


def test_punkt_sentences_and_treebank_words_offline():
    # English Punkt model: "Mr." and "D.C." do not end sentences; decimals neither.
    assert count_sentences("Mr. Smith visited Washington, D.C. last week. It rained 3.5 inches. Fine!") == 3
    assert word_tokenize("We don't know.") == ["We", "do", "n't", "know", "."]


@pytest.mark.parametrize(
    "iid,kwargs,response,expected",
    [
        ("keywords:existence", {"keywords": ["park", "Water"]}, "The PARK has water.", True),
        ("keywords:existence", {"keywords": ["park", "lake"]}, "The park has water.", False),
        (
            "keywords:frequency",
            {"keyword": "the", "frequency": 3, "relation": "at least"},
            "the cat, the dog, then",
            True,
        ),
        (
            "keywords:frequency",
            {"keyword": "the", "frequency": 3, "relation": "less than"},
            "the cat, the dog, then",
            False,
        ),
        ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "concatenate", True),
        ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "a Cat sat", False),
        ("keywords:letter_frequency", {"letter": "A", "let_frequency": 3, "let_relation": "at least"}, "banana", True),
        ("length_constraints:number_words", {"num_words": 4, "relation": "less than"}, "one two three", True),
        ("length_constraints:number_words", {"num_words": 4, "relation": "less than"}, "one two three four", False),
        ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "a\n***\nb", True),
        ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "a\n***\n\n***\nb", False),
        (
            "length_constraints:nth_paragraph_first_word",
            {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "second"},
            'First.\n\n"Second, para.',
            True,
        ),
        ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "hi\np. p. s later", True),
        ("detectable_content:postscript", {"postscript_marker": "P.S."}, "hi\nPS later", False),
        ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n- b\n**c**", True),
        ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*a* and **b**", True),
        ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*a* and * *", False),
        (
            "detectable_format:multiple_sections",
            {"section_spliter": "Section", "num_sections": 2},
            "Section 1\nx\nSection 2\ny",
            True,
        ),
        ("detectable_format:json_format", None, '```json\n{"a": 1}\n```', True),
        ("detectable_format:json_format", None, "{'a': 1}", False),
        ("detectable_format:title", None, "<<Poem of joy>>\ntext", True),
        ("detectable_format:title", None, "<< >>\ntext", False),
        ("detectable_format:constrained_response", None, "My answer is maybe.", True),
        ("combination:two_responses", None, "one\n******\ntwo", True),
        ("combination:two_responses", None, "one\n******\none", False),
        ("startend:end_checker", {"end_phrase": "Any other questions?"}, 'Done. "any other questions?"', True),
        ("startend:quotation", None, '  "quoted"  ', True),
        ("punctuation:no_comma", None, "a, b", False),
        (
            "change_case:capital_word_frequency",
            {"capital_frequency": 2, "capital_relation": "at least"},
            "NASA and ESA flew.",
            True,
        ),
        ("change_case:english_capital", None, "THIS IS ALL CAPITALS IN ENGLISH TEXT.", True),
        ("change_case:english_lowercase", None, "this has One capital letter in english.", False),
        ("language:response_language", {"language": "fr"}, "Bonjour, je m'appelle Pierre et j'habite à Paris.", True),
        ("language:response_language", {"language": "de"}, "Bonjour, je m'appelle Pierre et j'habite à Paris.", False),
    ],
)
def test_follows_examples(iid, kwargs, response, expected):
    assert follows(iid, kwargs, response) is expected


def test_empty_response_never_follows():
    assert follows("punctuation:no_comma", None, "") is False
    assert follows("punctuation:no_comma", None, " \n") is False


def test_none_kwargs_ignored_and_bad_kwargs_fail_loud():
    # google/IFEval rows carry every kwarg name with None for unused ones
    assert follows("punctuation:no_comma", {"num_words": None, "relation": None}, "no commas") is True
    with pytest.raises(ValueError, match="missing kwargs"):
        follows("length_constraints:number_words", {"num_words": 3}, "a b c")
    with pytest.raises(TypeError, match="unexpected kwargs"):
        follows("punctuation:no_comma", {"num_words": 3}, "a")
    with pytest.raises(KeyError, match="unknown IFEval instruction id"):
        follows("keywords:nope", None, "a")


def test_repeat_prompt_falls_back_to_prompt():
    assert follows("combination:repeat_prompt", None, "Tell me a joke. Ha.", prompt="tell me a joke.") is True
    assert follows("combination:repeat_prompt", {"prompt_to_repeat": "Other."}, "Tell me a joke.", prompt="x") is False


def test_loose_strips_first_last_line_and_stars():
    r = 'Sure, here it is:\n"All quoted"\nHope this helps'
    assert follows("startend:quotation", None, r) is False
    assert follows_loose("startend:quotation", None, r) is True
    r2 = "*my answer is yes*"
    assert follows("punctuation:no_comma", None, r2) is True
    assert follows_loose("detectable_format:title", None, r2) is False


def test_relations_and_extensions():
    assert [compare(3, rel, 3) for rel in ("less than", "at least", "at most", "exactly")] == [False, True, True, True]
    assert compare(11, "around", 10) and not compare(12, "around", 10)
    with pytest.raises(ValueError):
        compare(1, "more than", 1)


def test_fraction_and_rewards_numbers():
    ids = ["punctuation:no_comma", "detectable_format:title", "length_constraints:number_words"]
    kws = [None, None, {"num_words": 3, "relation": "at least"}]
    resp = "<<T>> one, two three"
    assert verdicts(ids, kws, resp) == [False, True, True]
    assert fraction_followed(ids, kws, resp) == pytest.approx(2 / 3)
    assert fraction_followed(ids, kws, resp, all_or_nothing=True) == 0.0
    completions = [resp, "<<T>> one two three", [{"role": "assistant", "content": "nope"}]]
    cols = {"instruction_id_list": [ids] * 3, "kwargs": [kws] * 3, "trainer_state": None}
    out = ifeval_strict(prompts=["p"] * 3, completions=completions, **cols)
    assert out == pytest.approx([2 / 3, 1.0, 1 / 3])
    assert ifeval_strict(["p"] * 3, completions, all_or_nothing=True, **cols) == [0.0, 1.0, 0.0]
    # a preamble line fails strict quotation; loose drops the first line
    q = {"instruction_id_list": [["startend:quotation"]], "kwargs": [[{}]]}
    assert ifeval_strict(["p"], ['Sure:\n"x y"'], **q) == [0.0]
    assert ifeval_loose(["p"], ['Sure:\n"x y"'], **q) == [1.0]


def test_reward_needs_columns():
    with pytest.raises(KeyError, match="instruction_id_list"):
        ifeval_strict(["p"], ["x"], kwargs=[[None]])


def test_verdicts_by_instruction_groups_per_id():
    ids = [["punctuation:no_comma", "detectable_format:title"], ["punctuation:no_comma"]]
    kws = [[None, None], [{}]]
    out = verdicts_by_instruction(["p", "p"], ["<<T>> a, b", "a b"], ids, kws)
    assert out == {"punctuation:no_comma": [0.0, 1.0], "detectable_format:title": [1.0]}


def test_rewards_are_pure_functions_of_the_text():
    """Same text -> same score regardless of batch order or repetition; inputs are not mutated."""
    import copy

    from posttrain.data.rlvr import generate_ifeval

    ds = generate_ifeval(12, seed=4)
    texts = [
        "<<Title>> hello there",
        "Bonjour, je m'appelle Pierre et j'habite à Paris.",
        "ALL CAPS HERE PLEASE",
        "just a line",
        "a\n***\nb",
        '"quoted, text"',
    ] * 2
    cols = {"instruction_id_list": ds["instruction_id_list"], "kwargs": ds["kwargs"]}
    snapshot = copy.deepcopy((texts, cols))
    first = ifeval_loose(ds["prompt"], texts, **cols)
    order = list(reversed(range(12)))
    again = ifeval_loose(
        [ds["prompt"][i] for i in order],
        [texts[i] for i in order],
        **{k: [v[i] for i in order] for k, v in cols.items()},
    )
    assert again == [first[i] for i in order]
    assert ifeval_loose(ds["prompt"], texts, **cols) == first
    assert (texts, cols) == snapshot


def test_ifeval_metrics_numbers():
    ids = [["punctuation:no_comma", "detectable_format:title"], ["startend:quotation"]]
    kws = [[None, None], [None]]
    m = ifeval_metrics(ids, kws, ["<<T>> a, b", 'Sure:\n"x"'])
    assert m == {
        "prompt_level_strict_acc": 0.0,
        "inst_level_strict_acc": pytest.approx(1 / 3),
        "prompt_level_loose_acc": 0.5,
        "inst_level_loose_acc": pytest.approx(2 / 3),
    }
