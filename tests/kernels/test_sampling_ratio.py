"""`sampling_importance_ratio`: TRL 1.16's vLLM importance-sampling correction (its four modes and bounds), on
numbers worked out by hand, and TRL's config rules for it."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algos.grpo.sampler_mismatch import sampling_importance_ratio
from posttrain.kernels.registry import SAMPLING_IS_MODES

OLD = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
SAMPLED = torch.tensor([[-1.5, -1.0, -0.5], [-0.2, math.nan, 7.0]])  # NaN: not reported; 7.0 is masked out
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
E = math.exp


@pytest.mark.parametrize(
    "mode,clip_min,clip_max,expected",
    [
        ("token_truncate", 0.5, 1.5, [[1.5, 0.5, 1.0], [0.5, 1.0, 1.0]]),
        ("token_truncate", None, 1.5, [[1.5, E(-1.0), 1.0], [E(-0.8), 1.0, 1.0]]),
        ("token_mask", 0.5, 1.5, [[0.0, 0.0, 1.0], [0.0, 1.0, 1.0]]),
        ("token_mask", None, 1.5, [[0.0, E(-1.0), 1.0], [E(-0.8), 1.0, 1.0]]),
        ("sequence_truncate", 0.5, 3.0, [[E(-0.5)], [0.5]]),
        ("sequence_mask", 0.5, 3.0, [[E(-0.5)], [0.0]]),
        ("sequence_mask", None, 3.0, [[E(-0.5)], [E(-0.8)]]),  # TRL's defaults
        ("sequence_mask", 0.7, None, [[0.0], [0.0]]),
    ],
)
def test_modes_and_bounds(mode, clip_min, clip_max, expected):
    ratio = sampling_importance_ratio(OLD, SAMPLED, MASK, mode, clip_min, clip_max)
    torch.testing.assert_close(ratio, torch.tensor(expected), rtol=1e-6, atol=1e-7)


def test_defaults_are_trls_and_bad_modes_fail():
    from trl import GRPOConfig

    fields = GRPOConfig.__dataclass_fields__
    assert fields["vllm_importance_sampling_mode"].default in SAMPLING_IS_MODES
    assert set(SAMPLING_IS_MODES) <= set(
        fields["vllm_importance_sampling_mode"].metadata["help"].replace("'", " ").split()
    )
    default = sampling_importance_ratio(OLD, SAMPLED, MASK)
    explicit = sampling_importance_ratio(
        OLD,
        SAMPLED,
        MASK,
        fields["vllm_importance_sampling_mode"].default,
        fields["vllm_importance_sampling_clip_min"].default,
        fields["vllm_importance_sampling_clip_max"].default,
    )
    assert torch.equal(default, explicit)
    with pytest.raises(ValueError, match="mode"):
        sampling_importance_ratio(OLD, SAMPLED, MASK, "tokens")
    with pytest.raises(ValueError, match="clip_min or clip_max"):
        sampling_importance_ratio(OLD, SAMPLED, MASK, "token_truncate", None, None)
