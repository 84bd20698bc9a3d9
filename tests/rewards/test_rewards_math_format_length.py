"""Math (math-verify), format and length-to-cap rewards, with numbers."""

from __future__ import annotations

import pytest

from posttrain.rewards.format import final_text, harmony_format, is_harmony_formatted, is_think_formatted, think_format
from posttrain.rewards.length import length_to_cap
from posttrain.rewards.math import digit_match, digit_match_reward, is_correct, math_reward


@pytest.mark.parametrize(
    "response,answer",
    [
        (r"\frac{1}{2}", "0.5"),
        (r"$\frac{1}{2}$", "0.5"),
        ("0.5", r"\frac{1}{2}"),
        (r"The answer is \boxed{12}", "12.0"),
        (r"\boxed{12}", 12),
        ("So the total is 1,000 apples.", "1000"),
        ("2/3", r"\frac{2}{3}"),
        (r"We get \boxed{\sqrt{2}}", r"\sqrt{2}"),  # bare LaTeX reference answer
        (r"x = \boxed{\dfrac{3}{6}}", "1/2"),
    ],
)
def test_is_correct_equivalent_forms(response, answer):
    assert is_correct(response, answer) is True


@pytest.mark.parametrize(
    "response,answer",
    [
        (r"\frac{1}{3}", "0.5"),
        (r"\boxed{13}", "12"),
        ("-12", "12"),
        ("First 12, but then I realised it is 7.", "12"),  # the last answer counts, not any
        ("", "3"),
        ("I don't know.", "3"),
    ],
)
def test_is_correct_rejects_wrong(response, answer):
    assert is_correct(response, answer) is False


# Gold answers as MATH-style data sets write them: bare LaTeX, no math delimiters. (gold, prediction, expected)
BARE_LATEX_GOLD = [
    (r"2\pi", r"The circumference is \boxed{2\pi}.", True),
    (r"2\pi", r"\boxed{2}", False),  # the leading number alone is not the answer
    (r"2\pi", r"\boxed{\pi}", False),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{2}}", True),
    (r"\frac{1}{2}", r"\boxed{0.5}", True),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{3}}", False),
    (r"\frac{1}{2}\pi", r"\boxed{\frac{\pi}{2}}", True),
    (r"\frac{1}{2}\pi", r"\boxed{\frac{1}{2}}", False),
    (r"\sqrt{2}", r"so $x = \boxed{\sqrt{2}}$", True),
    (r"\sqrt{2}", r"\boxed{2}", False),
    (r"3\sqrt{3}", r"\boxed{3\sqrt{3}}", True),
    (r"3\sqrt{3}", r"\boxed{3}", False),
    (r"\dfrac{14}{3}", r"\boxed{\frac{14}{3}}", True),
    (r"2\frac{1}{2}", r"\boxed{\frac{5}{2}}", True),  # mixed number
    (r"2\frac{1}{2}", r"\boxed{\frac{1}{2}}", False),
    (r"(3, \frac{\pi}{2})", r"\boxed{\left( 3, \frac{\pi}{2} \right)}", True),
    (r"(3, \frac{\pi}{2})", r"\boxed{(3, \pi)}", False),
    (r"x^2+1", r"\boxed{1 + x^2}", True),
    (r"x^2+1", r"\boxed{x^2 - 1}", False),
    (r"[0,1)", r"\boxed{[0,1)}", True),
    (r"[0,1)", r"\boxed{[0,1]}", False),
    (r"90^\circ", r"\boxed{90^\circ}", True),
    (r"90^\circ", r"\boxed{45^\circ}", False),
    (r"\infty", r"\boxed{\infty}", True),
    (r"\text{Evelyn}", r"\boxed{\text{Evelyn}}", True),
    (r"\text{Evelyn}", r"\boxed{\text{Carla}}", False),
    (r"-\frac{3}{4}", r"\boxed{-0.75}", True),
    (r"-\frac{3}{4}", r"\boxed{\frac{3}{4}}", False),
    # already delimited or plain golds keep working
    (r"$\frac{1}{2}$", r"\boxed{0.5}", True),
    (r"\boxed{5}", r"\boxed{5}", True),
    ("1,000", r"\boxed{1000}", True),
    ("12", r"\boxed{13}", False),
]


@pytest.mark.parametrize("gold,prediction,expected", BARE_LATEX_GOLD)
def test_is_correct_bare_latex_gold(gold, prediction, expected):
    assert is_correct(prediction, gold) is expected


def test_is_correct_prefers_boxed():
    assert is_correct(r"\boxed{4}, although 5 came up earlier", "4") is True
    assert is_correct(r"\boxed{4}, although 5 came up earlier", "5") is False


def test_math_reward_scores_final_answer_only():
    completions = [
        "<think>maybe 5</think>The answer is 7.",
        "<think>it is 7</think>The answer is 5.",
        "<|channel|>analysis<|message|>try 7<|end|><|start|>assistant<|channel|>final<|message|>\\boxed{7}<|return|>",
        [{"role": "assistant", "content": "7"}],
    ]
    assert math_reward(["q"] * 4, completions, answer=["7"] * 4) == [1.0, 0.0, 1.0, 1.0]
    # final_only=False parses the whole text, where "the answer is 5" in the reasoning wins
    text = "<think>the answer is 5</think>7"
    assert math_reward(["q"], [text], answer=["7"]) == [1.0]
    assert math_reward(["q"], [text], answer=["7"], final_only=False) == [0.0]
    with pytest.raises(ValueError, match="could not parse"):
        is_correct("1", "")


@pytest.mark.parametrize(
    "predicted,answer,score",
    [
        ("33", "33", 1.0),
        ("43", "33", 0.5),  # units right, tens wrong
        ("47", "33", 0.0),
        ("170", "180", 2 / 3),
        ("80", "180", 2 / 3),  # the hundreds digit missing counts as wrong
        ("1033", "33", 0.5),  # two extra places, both wrong
        ("007", "7", 1.0),
        ("-7", "7", 0.0),  # a sign that differs
        ("-17", "-7", 0.5),
        ("", "7", 0.0),
        ("7", "3.5", 0.0),  # integer answers only
    ],
)
def test_digit_match(predicted, answer, score):
    assert digit_match(predicted, answer) == pytest.approx(score)


def test_digit_match_reward_reads_the_last_number():
    completions = ["75 - 42 = 33", "75 - 42 = 43\n\nI added 1", "no number", [{"role": "assistant", "content": "31"}]]
    assert digit_match_reward(["q"] * 4, completions, answer=["33"] * 4) == [1.0, 0.0, 0.0, 0.5]
    assert digit_match_reward(["q"], ["75 - 42 = 43"], answer=["33"]) == [0.5]
    with pytest.raises(KeyError, match="answer"):
        digit_match_reward(["q"], ["1"])


HARMONY_OK = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Paris<|return|>"


@pytest.mark.parametrize(
    "text,ok",
    [
        (HARMONY_OK, True),
        ("<|channel|>final<|message|>Paris", True),  # stopped on <|return|> (stop string removed)
        ("<|channel|>final<|message|>Paris<|end|>", True),
        ("<|channel|>analysis<|message|>Think.<|end|>", False),  # no final channel
        ("<|channel|>final<|message|>   <|return|>", False),  # empty final
        ("<|channel|>final<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b", False),  # two finals
        ("<|channel|>final<|message|>a<|return|> trailing text", False),
        ("Paris", False),
    ],
)
def test_harmony_format(text, ok):
    assert is_harmony_formatted(text) is ok
    assert harmony_format(["p"], [text]) == [float(ok)]


@pytest.mark.parametrize(
    "text,require_open,ok",
    [
        ("<think>reason</think>answer", True, True),
        ("  <think>\nreason\n</think>\n\nanswer", True, True),
        ("reason</think>answer", True, False),
        ("reason</think>answer", False, True),
        ("<think></think>answer", True, False),
        ("<think>reason</think>   ", True, False),
        ("<think>a</think>b</think>c", True, False),
        ("answer first <think>reason</think>x", True, False),
        ("no tags", False, False),
    ],
)
def test_think_format(text, require_open, ok):
    assert is_think_formatted(text, require_open) is ok
    assert think_format(["p"], [text], require_open_tag=require_open) == [float(ok)]


def test_format_rewards_on_parsed_messages():
    """Conversational completions as TRL's parse_response returns them (GPT-OSS, Qwen-style)."""
    gptoss = [
        [{"role": "assistant", "thinking": "Think.", "content": "Paris"}],
        [{"role": "assistant", "thinking": "Think."}],  # no final channel
        [{"role": "assistant", "content": "<|channel|>final<|message|>Paris<|return|>"}],  # raw markup: text check
        [{"role": "assistant", "content": "<|channel|>analysis<|message|>x<|end|>"}],
    ]
    assert harmony_format(["p"] * 4, gptoss) == [1.0, 0.0, 1.0, 0.0]
    qwen = [
        [{"role": "assistant", "reasoning_content": "because", "content": "42"}],
        [{"role": "assistant", "reasoning_content": "", "content": "42"}],
        [{"role": "assistant", "content": "<think>because</think>42"}],
        [{"role": "assistant", "content": "42"}],
    ]
    assert think_format(["p"] * 4, qwen) == [1.0, 0.0, 1.0, 0.0]


def test_final_text():
    assert final_text(HARMONY_OK) == "Paris"
    assert final_text("<think>x</think> 42") == " 42"
    assert final_text("plain") == "plain"


def test_length_to_cap_tokens_and_chars():
    ids = [[1] * 2, [1] * 4, [1] * 9, []]
    assert length_to_cap(["p"] * 4, ["a"] * 4, cap=4, completion_ids=ids) == [0.5, 1.0, 1.0, 0.0]
    assert length_to_cap(["p"] * 2, ["ab", "abcdefgh"], cap=4, unit="chars") == [0.5, 1.0]
    assert length_to_cap(["p"], [[{"role": "assistant", "content": "abc"}]], cap=6, unit="chars") == [0.5]
    with pytest.raises(ValueError, match="completion_ids"):
        length_to_cap(["p"], ["a"], cap=4)
    with pytest.raises(ValueError):
        length_to_cap(["p"], ["a"], cap=0, unit="chars")


@pytest.mark.parametrize(
    "text, ok",
    [
        ("12", True),
        (" -3.5 ", True),
        ("\\boxed{7}", True),
        ("7 apples", False),
        ("x7", False),
        ("", False),
        ("\\boxed{7", False),
        ("<think>sum</think>42", True),
    ],
)
def test_numeric_answer_format(text, ok):
    from posttrain.rewards import get

    assert get("numeric_answer")(None, [text]) == [float(ok)]
