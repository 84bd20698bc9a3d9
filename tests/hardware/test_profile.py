"""`apply_profile(cfg)`: one test per setting a hardware profile decides."""

from __future__ import annotations

import os

import pytest
import torch

from posttrain.config import precision as precision_mod
from posttrain.dist import launch_hint
from posttrain.hardware import apply_profile
from posttrain.hardware import profile as profile_mod
from posttrain.hardware.sharding import sharding
from posttrain.models import load_kwargs, torch_dtype
from posttrain.training_args import common_training_kwargs
from tests.conftest import ROOT

PROFILES = ("cpu", "rtx4090", "a100", "a100_40gb", "h200", "tpu")


@pytest.mark.parametrize("hw", PROFILES)
def test_profiles_compose_with_required_settings(compose, hw):
    cfg = compose(f"hw={hw}")
    assert cfg.hw.name == hw and cfg.hw.device_gib > 0
    assert cfg.hw.precision == ("fp32" if hw == "cpu" else "bf16")  # cpu: auto, and the default model is tiny
    assert dict(cfg.hw.attn_implementation) == {"gpt_oss": "eager", "llama": "sdpa"}
    if cfg.hw.device == "cuda":
        assert cfg.hw.tf32 and cfg.hw.gradient_checkpointing is None and "expandable_segments" in cfg.hw.alloc_conf
        assert cfg.hw.accelerate_config
        assert "adamw" in cfg.hw.optimizer and cfg.hw.per_device_batch_size


def test_precision_sets_dtype_and_trainer_flags(compose, tmp_path):
    cfg = compose("hw=rtx4090", "model=tiny_llama")
    apply_profile(cfg, overrides=set())
    assert torch_dtype(cfg.model, cfg.hw) == torch.bfloat16
    kwargs = common_training_kwargs(cfg, tmp_path)
    assert kwargs["bf16"] and not kwargs["fp16"] and kwargs["tf32"]
    cpu = compose("hw=cpu")
    assert torch_dtype(cpu.model, cpu.hw) == torch.float32 and not common_training_kwargs(cpu, tmp_path)["bf16"]


@pytest.mark.parametrize(
    ("tiny", "bf16_units", "expected"), [(True, True, "fp32"), (False, True, "bf16"), (False, False, "fp32")]
)
def test_auto_precision_is_bf16_only_for_pretrained_models_on_bf16_cpus(
    compose, monkeypatch, tmp_path, tiny, bf16_units, expected
):
    monkeypatch.setattr(precision_mod, "cpu_has_bf16_units", lambda: bf16_units)
    cfg = compose("hw=cpu", "hw.precision=auto", "model=tiny_llama")
    cfg.model.tiny = tiny
    cfg.hw.precision = "auto"  # compose resolved it for this machine already
    applied = apply_profile(cfg, overrides=set())
    assert cfg.hw.precision == expected and applied["hw.precision"] == expected
    # bf16 on CPU: fp32 master weights under bf16 autocast (hw.bf16_param_dtype)
    assert torch_dtype(cfg.model, cfg.hw) == torch.float32
    assert common_training_kwargs(cfg, tmp_path)["bf16"] is (expected == "bf16")
    # bf16 trains llama with eager attention on CPU (ATen's CPU flash-attention backward is slow in bf16), the variant
    # whose gradient does not depend on the thread count
    assert cfg.model.attn_implementation == ("eager_thread_invariant" if expected == "bf16" else "sdpa")
    # the rollout copy comes with a pretrained model (bf16 or fp32 training), and the command line's backend wins
    assert cfg.algo.generation.backend == ("hf" if tiny else "bf16_copy")
    assert cfg.algo.generation.sampler == ("multinomial" if tiny else "inverse_cdf")  # the copy's sampler on a CPU
    cfg.hw.precision, cfg.algo.generation.backend, cfg.algo.generation.sampler = "auto", "hf", "multinomial"
    apply_profile(cfg, overrides={"algo.generation.backend"})
    assert cfg.algo.generation.backend == "hf" and cfg.algo.generation.sampler == "multinomial"


def test_bf16_param_dtype_only_where_the_model_dtype_is_auto(compose):
    cpu = compose("hw=cpu", "hw.precision=bf16", "model=tiny_llama")
    assert apply_profile(cpu, overrides=set())["model.dtype"] == "float32"
    assert torch_dtype(cpu.model, cpu.hw) == torch.float32
    pinned = compose("hw=cpu", "hw.precision=bf16", "model=tiny_llama", "model.dtype=bfloat16")
    apply_profile(pinned, overrides=set())
    assert torch_dtype(pinned.model, pinned.hw) == torch.bfloat16
    gpu = compose("hw=h200", "model=tiny_llama")  # GPU profiles: bf16 weights
    apply_profile(gpu, overrides=set())
    assert torch_dtype(gpu.model, gpu.hw) == torch.bfloat16


def test_cpu_flags_are_read_from_cpuinfo(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(precision_mod, "Path", lambda _: info)
    info.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_vnni amx_tile\n")
    assert not precision_mod.cpu_has_bf16_units()  # AVX-512 without its bf16 extension, AMX tiles without bf16
    info.write_text("processor : 0\nflags : fpu avx512f avx512_bf16\n")  # AMD Zen 4
    assert precision_mod.cpu_has_bf16_units()
    info.write_text("processor : 0\nflags : fpu amx_bf16 amx_tile\n")
    assert precision_mod.cpu_has_bf16_units()
    info.write_text("processor : 0\nmodel name : avx512_bf16\n")  # only the flags line counts
    assert not precision_mod.cpu_has_bf16_units()


def test_tf32_sets_matmul_precision(compose):
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        apply_profile(compose("hw=cpu"), overrides=set())
        assert torch.get_float32_matmul_precision() == "highest"
        applied = apply_profile(compose("hw=h200"), overrides=set())
        assert torch.get_float32_matmul_precision() == "high" and applied["float32_matmul_precision"] == "high"
    finally:
        torch.set_float32_matmul_precision(before)


def test_threads_set_torch_threads(compose):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        applied = apply_profile(compose("hw=h200"), overrides=set())  # null: torch's default stays
        assert torch.get_num_threads() == 2 and "torch_threads" not in applied
        applied = apply_profile(compose("hw=cpu", "hw.threads=1"), overrides=set())
        assert torch.get_num_threads() == 1 and applied["torch_threads"] == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("load,expected", [(0.0, 4), (1.4, 3), (2.6, 1), (9.0, 1)])
def test_threads_zero_uses_idle_cores(compose, monkeypatch, load, expected):
    monkeypatch.setattr(profile_mod.os, "sched_getaffinity", lambda pid: set(range(4)))
    monkeypatch.setattr(profile_mod.os, "getloadavg", lambda: (load, 0.0, 0.0))
    before = torch.get_num_threads()
    try:
        applied = apply_profile(compose("hw=cpu", "hw.threads=0"), overrides=set())
        assert applied["torch_threads"] == expected == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("model,impl", [("tiny_gpt_oss", "eager"), ("tiny_llama", "sdpa")])
def test_attention_per_family(compose, model, impl):
    cfg = compose(f"model={model}", "hw=a100")
    assert cfg.model.attn_implementation is None
    apply_profile(cfg, overrides=set())
    assert cfg.model.attn_implementation == impl == load_kwargs(cfg.model, cfg.hw)["attn_implementation"]
    explicit = compose(f"model={model}", "hw=a100", "model.attn_implementation=eager")
    apply_profile(explicit, overrides=set())
    assert explicit.model.attn_implementation == "eager"


@pytest.mark.parametrize("algo", ["grpo", "d2l", "contrastive"])
def test_gradient_checkpointing_non_reentrant(compose, tmp_path, algo):
    """The profile's checkpointing reaches every algorithm's decoder layers through HF Trainer (one decision:
    posttrain.training_args.gradient_checkpointing), non-reentrant."""
    from transformers import TrainerCallback

    from posttrain.algos.registry import get_algorithm
    from tests.reliability.helpers import TINY

    seen = {}

    class Look(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)]
            seen["layers"] = len(layers)
            seen["reentrant"] = {m._gradient_checkpointing_func.keywords.get("use_reentrant") for m in layers}
            control.should_training_stop = True

    cfg = compose(
        "model=tiny_llama",
        "hw=cpu",
        "hw.gradient_checkpointing=true",
        *TINY[algo],
        "trainer.max_steps=1",
        "trainer.progress_bar=false",
        run_dir=tmp_path,
    )
    apply_profile(cfg, overrides=set())
    get_algorithm(algo).build_trainer(cfg, tmp_path, [Look()]).train()
    assert seen["layers"] >= cfg.model.arch.num_hidden_layers and seen["reentrant"] == {False}


def test_alloc_conf_env(compose, monkeypatch):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    apply_profile(compose("hw=cpu"), overrides=set())
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    apply_profile(compose("hw=rtx4090"), overrides=set())
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


@pytest.mark.parametrize("bnb", [True, False])
def test_optimizer_8bit_only_with_bitsandbytes(compose, monkeypatch, bnb):
    monkeypatch.setattr(profile_mod, "has_bitsandbytes", lambda: bnb)
    cfg = compose("hw=rtx4090")
    apply_profile(cfg, overrides=set())
    assert cfg.hw.optimizer == ("paged_adamw_8bit" if bnb else "adamw_torch_fused")
    big = compose("hw=h200")
    apply_profile(big, overrides=set())
    assert big.hw.optimizer == "adamw_torch_fused"


def test_batch_default_unless_given(compose):
    cfg = compose("hw=rtx4090")
    apply_profile(cfg, overrides=set())
    assert cfg.trainer.per_device_batch_size == 8
    given = compose("hw=rtx4090", "trainer.per_device_batch_size=24")
    apply_profile(given, overrides={"trainer.per_device_batch_size"})
    assert given.trainer.per_device_batch_size == 24
    # GRPO counts completions: whole groups of num_generations per generation round
    odd = compose("hw=rtx4090", "algo.trl.num_generations=6", "trainer.per_device_batch_size=12")
    apply_profile(odd, overrides=set())
    assert odd.trainer.per_device_batch_size == 12  # 8 rounded up to a multiple of 6
    assert compose("hw=cpu").trainer.per_device_batch_size == 16  # cpu keeps the trainer's


def test_vllm_mode_and_share_are_trls_on_every_profile(compose):
    """No profile decides vLLM's mode or memory share: TRL's defaults, or the command line's value, stay."""
    from trl import GRPOConfig

    fields = GRPOConfig.__dataclass_fields__
    for hw in ("h200", "a100", "rtx4090", "cpu"):
        cfg = compose(f"hw={hw}")
        apply_profile(cfg, overrides=set())
        assert cfg.algo.trl.vllm_mode == fields["vllm_mode"].default == "colocate", hw
        assert cfg.algo.trl.vllm_gpu_memory_utilization == fields["vllm_gpu_memory_utilization"].default, hw
    kept = compose("hw=h200", "algo.trl.vllm_mode=server")
    apply_profile(kept, overrides=set())
    assert kept.algo.trl.vllm_mode == "server"


def test_tpu_prefers_pallas_unless_chosen(compose):
    cfg = compose("hw=tpu")
    apply_profile(cfg, overrides=set())
    assert cfg.kernels.backend == "pallas" and cfg.hw.device == "xla" and cfg.hw.precision == "bf16"
    chosen = compose("hw=tpu", "kernels=eager")
    apply_profile(chosen, overrides={"kernels"})
    assert chosen.kernels.backend == "eager"


def test_more_than_one_device_names_launcher_and_sharding(compose):
    one = compose("hw=a100")
    assert launch_hint(one, argv=["hw=a100"]) is None and sharding(one.hw) == "none"
    four = compose("hw=a100", "hw.num_devices=4")
    cmd = launch_hint(four, argv=["hw=a100", "hw.num_devices=4", "mode=plan"])
    assert cmd == "python -m posttrain.launch hw=a100 hw.num_devices=4"
    assert sharding(four.hw) == "grads+optimizer"
    assert sharding(compose("hw=h200", "hw.num_devices=8").hw) == "all"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (("model=gpt_oss", "hw=h200"), False),  # 20B LoRA GRPO fits 140 GiB without recomputing
        (("model=gpt_oss", "hw=a100"), True),
        (("model=llama3_2_1b", "hw=rtx4090"), False),
        (("model=llama3_1_8b", "hw=rtx4090"), True),
    ],
)
def test_gpu_profiles_checkpoint_only_where_the_plan_needs_it(compose, overrides, expected):
    from posttrain.hardware.memory import plan

    cfg = compose(*overrides)
    applied = apply_profile(cfg, overrides=set())
    assert cfg.hw.gradient_checkpointing is expected and applied["hw.gradient_checkpointing"] is expected
    without = cfg.copy()
    without.hw.gradient_checkpointing = False
    assert plan(without).fits is not expected  # on exactly when the plan without it does not fit
    assert plan(cfg).fits or expected
    forced = compose(*overrides, "hw.gradient_checkpointing=true")
    apply_profile(forced, overrides=set())
    assert forced.hw.gradient_checkpointing is True  # the command line wins


def test_override_keys_strip_prefixes_values_and_packages():
    keys = profile_mod.override_keys(
        ["+trainer.lr=1e-4", "~algo.kl.target", "model@foo=tiny_llama", "kernels=trl", "a.b=x=y"]
    )
    assert keys == {"trainer.lr", "algo.kl.target", "model", "kernels", "a.b"}


@pytest.mark.parametrize(
    "hw, model, backend",
    [
        ("h200", "smollm2_135m", "static"),  # copy 0.27 GB of 140: launch-bound decoding, the copy pays
        ("h200", "llama3_2_1b", "static"),
        ("h200", "llama3_1_8b", "static_policy"),  # 16 GB copy: over GPU_COPY_SHARE, decode from the policy
        ("h200", "gpt_oss", "static_policy"),
        ("cpu", "smollm2_135m", "bf16_copy"),  # hw=cpu's oneDNN-packed bf16 copy
        ("cpu", "llama3_1_8b", "static_policy"),  # its copy: 15 of 24 GiB, over CPU_COPY_SHARE
    ],
)
def test_profile_generation_backend_only_for_small_models_on_gpu(compose, hw, model, backend):
    cfg = compose(f"hw={hw}", f"model={model}", "algo=grpo", "hw.precision=bf16")
    apply_profile(cfg, overrides=set())
    assert cfg.algo.generation.backend == backend
    pinned = compose(f"hw={hw}", f"model={model}", "algo=grpo", "hw.precision=bf16", "algo.generation.backend=hf")
    apply_profile(pinned, overrides={"algo.generation.backend"})
    assert pinned.algo.generation.backend == "hf"  # the command line wins


def test_profiles_describe_the_device_only():
    """No algorithm setting in a profile: GRPO's device-dependent defaults (kernel, rollout engine, sampler, vLLM)
    live in the algorithm (`device_defaults`), and a profile states only the fields it changes."""
    from dataclasses import fields

    import yaml

    from posttrain.algos.grpo.device_defaults import DeviceDefaults, device_defaults
    from posttrain.config.schema import HwConfig

    hw_fields = {f.name for f in fields(HwConfig)}
    assert not hw_fields & {f.name for f in fields(DeviceDefaults)}
    for path in sorted((ROOT / "conf" / "hw").glob("*.yaml")):
        keys = set(yaml.safe_load(path.read_text()) or {})
        assert keys <= hw_fields | {"defaults"}, path.name
        nulls = [k for k, v in (yaml.safe_load(path.read_text()) or {}).items() if v is None]
        assert not nulls, f"{path.name} restates schema defaults: {nulls}"
    assert device_defaults(load_config_hw("h200")).generation_backend == "static"
    assert device_defaults(load_config_hw("rtx4090")).generation_backend is None
    assert device_defaults(load_config_hw("cpu")).kernels == "fused"


def load_config_hw(name: str):
    from posttrain.config.compose import load_config

    return load_config([f"hw={name}"]).hw
