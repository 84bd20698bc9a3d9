"""The sharded engines' own buffers in the memory plan (posttrain.hardware.engine_memory): each term's size and the
phases it is alive in, from the parameter counts alone. Measured against per-process peak RSS in
experiments/scale_out (memory.py)."""

from __future__ import annotations

import pytest

from posttrain.hardware import plan
from posttrain.hardware.engine_memory import MAX_LIVE_PARAMETERS, REDUCE_BUCKET_SIZE
from posttrain.hardware.memory import Plan

# a Llama-shaped model big enough that the engines' buffers differ from one another (untied 32k-row head)
ARCH = ("hidden_size=512", "intermediate_size=1024", "num_hidden_layers=4", "vocab_size=32000")
FULL = ("model=tiny_llama", *(f"model.arch.{a}" for a in ARCH), "model.lora.enabled=false", "algo.trl.beta=0")


def _plan(compose, engine: str, devices: int = 2, *more: str) -> Plan:
    return plan(compose(*FULL, "hw=cpu", f"hw.num_devices={devices}", f"hw.accelerate_config={engine}", *more))


def _items(p: Plan, name: str) -> list:
    return [i for i in p.items if i.name == name]


def test_fsdp2_gathers_the_root_and_two_layers_whatever_the_number_of_processes(compose):
    two, four = _plan(compose, "fsdp2", 2), _plan(compose, "fsdp2", 4)
    c = two.counts
    root = (c.embedding + c.lm_head) * 4  # fp32 on a CPU
    layer = (c.weight_bytes - root) / 4
    assert c.embedding == c.lm_head == 32000 * 512
    for p in (two, four):
        (gathered,) = _items(p, "gathered parameters")
        assert gathered.phase == "forward" and gathered.bytes == pytest.approx(root + 2 * layer)
    assert _items(four, "weights")[0].bytes == pytest.approx(_items(two, "weights")[0].bytes / 2)
    # the root's gradients stay whole until the end of the backward: all but this process's share is extra
    assert _items(two, "unsharded root gradients")[0].bytes == pytest.approx(root / 2)
    assert _items(four, "unsharded root gradients")[0].bytes == pytest.approx(root * 3 / 4)
    lora = plan(compose("model=tiny_llama", "hw=cpu", "hw.num_devices=2", "hw.accelerate_config=fsdp2"))
    assert not _items(lora, "unsharded root gradients")  # a frozen root has none


def test_zero3_keeps_its_bucket_and_gathers_every_parameter(compose):
    p = _plan(compose, "deepspeed_zero3")
    c = p.counts
    assert c.total < min(REDUCE_BUCKET_SIZE, MAX_LIVE_PARAMETERS)  # the whole model fits both limits
    parts = {i.name: i for i in p.items}
    assert parts["reduce bucket"].phase == parts["gradient partition"].phase == "persistent"
    assert parts["reduce bucket"].bytes == c.trainable * 4  # on a CPU, only what the gradients fill is resident
    assert parts["gradient partition"].bytes == c.trainable * 4 / 2
    assert parts["reduce-scatter input"].bytes == c.trainable * 4
    assert {i.phase for i in _items(p, "gathered parameters")} == {"train", "score"}
    assert parts["gathered for generation"].bytes == c.weight_bytes
    assert "gradients" not in parts  # DeepSpeed's gradients are its partition
    assert parts["gradients (in backward)"].bytes == c.largest_trainable * 4
    gpu = plan(compose(*FULL, "hw=h200", "hw.num_devices=2", "hw.accelerate_config=deepspeed_zero3"))
    assert {i.name: i for i in gpu.items}["reduce bucket"].bytes == REDUCE_BUCKET_SIZE * 2  # reserved whole, bf16


def test_zero2_frees_bucket_and_partition_after_the_step(compose):
    p = _plan(compose, "deepspeed_zero2")
    partition = _items(p, "gradient partition")[0]
    assert partition.phase == "backward+step"
    without = Plan(p.counts, p.work, [i for i in p.items if i.phase != "backward+step"], p.device_bytes)
    extra = sum(i.bytes for i in p.items if i.phase == "backward+step")
    for phase in ("train", "step"):
        assert p.phase_bytes(phase) == pytest.approx(without.phase_bytes(phase) + extra)
    assert p.phase_bytes("generate") == pytest.approx(without.phase_bytes("generate"))
    assert not _items(p, "gathered parameters")  # ZeRO-2 holds the whole weights: nothing to gather
    assert _items(p, "weights")[0].bytes == p.counts.weight_bytes


def test_one_process_and_ddp_have_no_engine_buffers(compose):
    names = {"gathered parameters", "reduce bucket", "gradient partition", "unsharded root gradients"}
    for p in (_plan(compose, "deepspeed_zero3", 1), _plan(compose, "ddp", 2)):
        assert not names & {i.name for i in p.items}


def test_fsdp2_and_zero3_gather_the_whole_weights_to_save_on_a_cpu_only(compose):
    for engine in ("fsdp2", "deepspeed_zero3"):
        p = _plan(compose, engine)
        (saved,) = _items(p, "whole weights (checkpoint)")
        c = p.counts
        assert saved.phase == "save" and saved.bytes == c.weight_bytes + c.embedding * 4  # + the largest, gathered
        assert p.phase_bytes("save") == saved.bytes
        gpu = plan(compose(*FULL, "hw=h200", "hw.num_devices=2", f"hw.accelerate_config={engine}"))
        assert not _items(gpu, "whole weights (checkpoint)")  # rank 0 gathers into host memory, not the device's
    assert not _items(_plan(compose, "deepspeed_zero2"), "whole weights (checkpoint)")  # it holds them already
