"""`model.lora.targets`: which modules get a LoRA adapter (attention | all_linear), on both families, and the memory
plan's trainable count equal to the instantiated PEFT model's for each choice."""

from __future__ import annotations

import pytest
from peft.tuners.lora import LoraLayer

from posttrain.config.validate import ConfigError
from posttrain.hardware import count_params
from posttrain.models import load

ATTENTION = {"q_proj", "k_proj", "v_proj", "o_proj"}
MLP = {"gate_proj", "up_proj", "down_proj"}


EXPERTS = {"experts.gate_up_proj", "experts.down_proj"}


def _adapted(model) -> dict[str, int]:
    """Adapted targets (a module's name, or `experts.<parameter>` for PEFT's target_parameters) -> how many layers
    have one."""
    names: dict[str, int] = {}
    for path, module in model.named_modules():
        if isinstance(module, LoraLayer):
            param = getattr(module, "parameter_name", None)
            leaf = f"experts.{param}" if param else path.split(".")[-1]
            names[leaf] = names.get(leaf, 0) + 1
    return names


@pytest.mark.parametrize(
    ("model_name", "overrides", "expected"),
    [
        ("tiny_llama", [], ATTENTION),
        ("tiny_llama", ["model.lora.targets=all_linear"], ATTENTION | MLP),
        ("tiny_gpt_oss", [], ATTENTION),
        # GPT-OSS: its MLP is the experts (batched parameters); all_linear is its attention, the router never adapted
        ("tiny_gpt_oss", ["model.lora.targets=all_linear"], ATTENTION),
        ("tiny_gpt_oss", ["model.lora.targets=all_linear", "model.lora.experts=true"], ATTENTION | EXPERTS),
    ],
)
def test_adapted_modules_and_plan_trainable_count(compose, model_name, overrides, expected):
    cfg = compose(f"model={model_name}", *overrides)
    model, _ = load(cfg)
    adapted = _adapted(model)
    layers = cfg.model.arch.num_hidden_layers
    assert adapted == {n: layers for n in expected}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert all("lora_" in n for n in trainable) and not any("router" in n for n in trainable)
    counts = count_params(cfg)  # the memory plan's count, from a meta-device build
    assert counts.trainable == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert counts.trainable_bytes == sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def test_all_linear_adds_the_mlp_to_llamas_trainable_count(compose):
    """r x (in + out) per MLP projection per layer: the plan counts exactly what all_linear adds."""
    cfg = compose("model=llama3_2_1b")
    a = cfg.model.arch
    mlp = cfg.model.lora.r * 3 * (a.hidden_size + a.intermediate_size) * a.num_hidden_layers
    all_linear = count_params(compose("model=llama3_2_1b", "model.lora.targets=all_linear"))
    assert all_linear.trainable - count_params(cfg).trainable == mlp


def test_targets_choices_and_conflicts_are_one_line(compose):
    with pytest.raises(ConfigError, match=r"model\.lora\.targets='mlp' is not one of attention, all_linear"):
        compose("model.lora.targets=mlp")
    with pytest.raises(ConfigError, match="give one"):
        compose("model.lora.targets=all_linear", "model.lora.target_modules=[q_proj]")
    assert list(compose("model.lora.target_modules=[q_proj,v_proj]").model.lora.target_modules) == ["q_proj", "v_proj"]
