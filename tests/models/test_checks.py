"""`posttrain.models.checks`: the model group against transformers and PEFT before weights load, one line each."""

from __future__ import annotations

import pytest

from posttrain.config.compose import load_config
from posttrain.config.validate import ConfigError


@pytest.mark.parametrize(
    "overrides, line",
    [
        (["model.arch.hidden_size=-64"], "model.arch.hidden_size=-64 must be > 0"),
        (["+model.arch.hiden_size=64"], "model.arch.hiden_size: LlamaConfig has no such field (did you mean"),
        (["model.arch.num_key_value_heads=3"], "model.arch.num_key_value_heads=3 must divide num_attention_heads=4"),
        (["model.arch.num_attention_heads=3", "model.arch.num_key_value_heads=3"], "LlamaConfig refuses it: "),
        (["model.attn_implementation=bogus"], "model.attn_implementation='bogus' is not one of eager,"),
        (["model.attn_implementation=flash_attention_2"], "runs on CUDA only, not hw.device=cpu"),
        (["model.lora.target_modules=[foo_proj]"], "'foo_proj' names no module of this llama model; its linear"),
        (["model=tiny_gpt_oss", "model.lora.target_modules=[q_proj,gate_proj]"], "'gate_proj' names no module"),
    ],
)
def test_bad_model_settings_fail_before_anything_loads_in_one_line(overrides, line):
    """`validate` (run's pre-load check) and the memory plan (a meta model, the run's first build) refuse them."""
    from posttrain.hardware.memory import plan

    with pytest.raises(ConfigError) as err:
        cfg = load_config([*overrides, "mode=plan"])
        plan(cfg)
    assert line in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_every_model_and_the_legacy_rope_keys_pass():
    import glob
    from pathlib import Path

    from posttrain.models.checks import check_arch, check_attention
    from posttrain.paths import CONF_DIR

    models = sorted(Path(p).stem for p in glob.glob(str(CONF_DIR / "model" / "*.yaml")))
    assert len(models) >= 7
    for model in models:
        cfg = load_config([f"model={model}", "mode=plan"])  # rope_theta is a legacy key LlamaConfig folds in
        check_arch(cfg.model)
        check_attention(cfg.model, "cpu")
    check_attention(load_config(["model.attn_implementation=eager_thread_invariant"]).model, "cpu")


def test_a_chat_template_with_a_syntax_error_is_one_line_with_its_line(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}\n{{ m['content'] }\n{% endfor %}")
    with pytest.raises(ConfigError, match=rf"^model\.chat_template={bad}: line 2: unexpected '}}'$"):
        load_config([f"model.chat_template={bad}"])


def test_model_files_a_tiny_model_would_ignore_or_transformers_would_trip_on(tmp_path):
    with pytest.raises(ConfigError, match=r"^model\.path is ignored by model=tiny_llama \(model\.tiny=true"):
        load_config([f"model.path={tmp_path}"])
    (tmp_path / "config.json").write_text("{bad")
    with pytest.raises(ConfigError, match=r"config\.json does not parse \(Expecting property name"):
        load_config(["model=smollm2_135m", f"model.path={tmp_path}"])
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"^model\.path=.*: no tokenizer \(tokenizer\.json, "):
        load_config(["model=smollm2_135m", f"model.path={tmp_path}"])
    (tmp_path / "tokenizer.json").write_text("{}")
    load_config(["model=smollm2_135m", f"model.path={tmp_path}"])
    load_config(["model=smollm2_135m", "model.path=/nowhere", "mode=plan"])  # a plan reads no files
