"""`RolloutEngine`: sample completions for a batch of tokenized prompts from one model, one call.

    engine = RolloutEngine(model, generation_config, pad_token_id=..., eos_token_ids=[...])
    completion_ids = engine.generate(prompt_ids)     # list of token lists, each up to and including its first EOS
    completion_ids, logps = engine.generate_with_logprobs(prompt_ids)   # + the sampler's log-prob of each token
    seconds = engine.sync(policy)                    # a merged copy follows the policy (0.0 without a copy)

`generate` does what TRL's GRPOTrainer does on its transformers path (left padding, `model.generate` with the
trainer's `GenerationConfig`, everything after the first EOS dropped), so an engine over the same model and
configuration samples exactly TRL's tokens (with the default `multinomial` sampler); what the engines change is the
model (`RolloutCopy`) and the configuration. With `static_cache_len` the engine passes `generate` a `StaticCache` of
that many positions, one per batch size, allocated once and reset before every call (so its buffers keep their
addresses, as CUDA graphs need), and `static_generation_config` turns on transformers' own compilation of the decode
step (`torch.compile` of the forward; CUDA graphs with `mode="reduce-overhead"` on CUDA). The prefill runs
uncompiled (its shape follows the prompt length); every decode step has one shape (batch x 1 token against
`static_cache_len` cached positions), so it compiles once per batch size. With `sampler="inverse_cdf"` each token is
drawn by `InverseCdfSampler` inside a greedy `generate` instead of by transformers' `torch.multinomial`
(posttrain.rollout.inverse_cdf: slow on a CPU).

The sampler's log-probabilities (`generate_with_logprobs`, what the trainer compares with the learner's to measure
and correct the sampler/learner mismatch) are recorded during decoding by `SamplerLogprobs`: log softmax(logits / T)
of each sampled token, the distribution the learner scores (temperature only; top-p/top-k truncation is not in it,
as it is not in the learner's log-probs).

Sliding-window layers (GPT-OSS) get full-length cache layers too: transformers' sliding static layer tracks its
fill level in a Python int, which `torch.compile` specialises on, recompiling at every decode step. The window is
still applied, by the attention mask, over absolute positions: the same attention (sinks included) as the
dynamic cache's, at the cost of caching all positions of those layers.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, StaticCache
from transformers.generation import CompileConfig

from posttrain.models.shared_prompt import prefill_distinct_prompts
from posttrain.rollout.inverse_cdf import InverseCdfSampler, greedy_config
from posttrain.rollout.merged_copy import RolloutCopy


def static_generation_config(
    base: GenerationConfig, compile: bool, device_type: str, compile_backend: str = "inductor"
) -> GenerationConfig:
    """`base` for generating into a `StaticCache` and, when `compile`, with a compiled decode step.

    On CUDA the step is captured as a CUDA graph (`mode="reduce-overhead"`); elsewhere it is compiled without
    graphs (transformers only compiles on accelerators unless told to, `_compile_all_devices`).
    """
    config = copy.deepcopy(base)
    config.cache_implementation = None  # the engine passes its own cache
    config.use_cache = True
    config.disable_compile = not compile
    if compile:
        compile_config = CompileConfig(
            fullgraph=True,
            dynamic=False,
            backend=compile_backend,
            mode="reduce-overhead" if device_type == "cuda" and compile_backend == "inductor" else "default",
        )
        setattr(compile_config, "_compile_all_devices", device_type != "cuda")  # noqa: B010 (typed None)
        config.compile_config = compile_config
    return config


def static_cache(model_config: Any, max_cache_len: int) -> StaticCache:
    """A `StaticCache` of `max_cache_len` positions with full-length layers, sliding-window layers included."""
    config = copy.deepcopy(model_config.get_text_config(decoder=True))
    config.layer_types = ["full_attention"] * config.num_hidden_layers
    return StaticCache(config=config, max_cache_len=max_cache_len)


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_token_id: int, multiple: int | None = None):
    """(input_ids, attention_mask) [B, L]: prompts right-aligned (left padding), L rounded up to `multiple`."""
    longest = max(len(p) for p in prompt_ids)
    if multiple:
        longest = -(-longest // multiple) * multiple
    ids = torch.full((len(prompt_ids), longest), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), longest), dtype=torch.long)
    for row, prompt in enumerate(prompt_ids):
        if prompt:
            ids[row, -len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[row, -len(prompt) :] = 1
    return ids, mask


def until_first_eos(completions: torch.Tensor, eos_token_ids: Sequence[int]) -> list[list[int]]:
    """Each row up to and including its first EOS token (the whole row when it has none), as lists."""
    is_eos = torch.isin(completions, torch.tensor(list(eos_token_ids), device=completions.device))
    width = completions.size(1)
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1), torch.full_like(is_eos[:, 0], width, dtype=torch.long))
    lengths = (first + 1).clamp(max=width).tolist()
    rows = completions.tolist()
    return [row[:n] for row, n in zip(rows, lengths)]


class SamplerLogprobs(LogitsProcessor):
    """Records log softmax(logits / temperature) of every token `generate` samples, one [B, V] step at a time.

    transformers runs custom processors before its warpers, so the scores seen here are the model's logits (after
    the generation config's own processors such as `min_new_tokens`); a step's token is only known at the next
    step (the last column of `input_ids`) or, for the last step, from the output (`finish`).
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.pending: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self.steps.append(self.pending.gather(1, input_ids[:, -1:]).squeeze(1))
        self.pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """[B, T] log-probs of `new_tokens` [B, T] (the generated columns of the output)."""
        if self.pending is not None and len(self.steps) < new_tokens.size(1):
            self.steps.append(self.pending.gather(1, new_tokens[:, len(self.steps)].unsqueeze(1)).squeeze(1))
        self.pending = None
        return torch.stack(self.steps, 1) if self.steps else new_tokens.new_zeros(new_tokens.shape, dtype=torch.float)


class RolloutEngine:
    """Generates with `model` (or with `rollout_copy.model`, kept in step with the policy by `sync`)."""

    def __init__(
        self,
        model: Any,
        generation_config: GenerationConfig,
        *,
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        pad_to_multiple_of: int | None = None,
        rollout_copy: RolloutCopy | None = None,
        static_cache_len: int | None = None,
        share_prompts: bool = True,
        sampler: str = "multinomial",
        name: str = "hf",
    ):
        self.rollout_copy = rollout_copy
        self.model = rollout_copy.model if rollout_copy is not None else model
        self.generation_config = generation_config
        self.pad_token_id = pad_token_id
        self.eos_token_ids = list(eos_token_ids)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.static_cache_len = static_cache_len
        self._caches: dict[int, StaticCache] = {}  # by batch size
        self.share_prompts = share_prompts  # dynamic cache: each distinct prompt prefilled once (shared_prompt)
        self.name = name
        # inverse_cdf: sample inside a greedy generate (posttrain.rollout.inverse_cdf); multinomial: transformers'
        if sampler not in ("multinomial", "inverse_cdf"):  # posttrain.rollout.SAMPLERS
            raise ValueError(f"rollout: sampler {sampler!r} is not multinomial or inverse_cdf")
        self.sampler = sampler

    def sync(self, policy: torch.nn.Module) -> float:
        """Copy the policy's trained weights into the rollout copy; the seconds it took (device work included)."""
        if self.rollout_copy is None:
            return 0.0
        start = time.perf_counter()
        self.rollout_copy.sync(policy)
        device = next(self.model.parameters()).device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    def generate(self, prompt_ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """One completion per prompt: token ids up to and including the first EOS (TRL's completion ids)."""
        return self._generate(prompt_ids, record=False)[0]

    def generate_with_logprobs(self, prompt_ids: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[list[float]]]:
        """`generate`'s completions and, per token, the sampler's log-probability of it (`SamplerLogprobs`)."""
        ids, logps = self._generate(prompt_ids, record=True)
        assert logps is not None
        return ids, logps

    @torch.no_grad()
    def _generate(self, prompt_ids: Sequence[Sequence[int]], record: bool):
        device = next(self.model.parameters()).device
        ids, mask = left_pad(prompt_ids, self.pad_token_id, self.pad_to_multiple_of)
        ids, mask = ids.to(device), mask.to(device)
        extra: dict[str, Any] = {}
        if self.static_cache_len is not None:
            extra["past_key_values"] = self._static_cache(ids.size(0), ids.size(1))
        recorder = None
        processors = LogitsProcessorList()
        if record:
            recorder = SamplerLogprobs(self.generation_config.temperature or 1.0)  # the learner's T, greedy or not
            processors.append(recorder)
        config = self.generation_config
        if self.sampler == "inverse_cdf" and config.do_sample:  # read per call: the config may be changed in place
            processors.append(InverseCdfSampler(config))  # after the recorder: that one sees the model's scores
            config = greedy_config(config)
        if processors:
            extra["logits_processor"] = processors
        was_training = self.model.training
        self.model.eval()
        try:
            if "past_key_values" not in extra and self.share_prompts and self.generation_config.use_cache is not False:
                cache = prefill_distinct_prompts(self.model, ids, mask)
                if cache is not None:
                    extra["past_key_values"] = cache
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=config,
                **extra,
            )
        finally:
            self.model.train(was_training)
        new = out[:, ids.size(1) :]
        completions = until_first_eos(new, self.eos_token_ids)
        if recorder is None:
            return completions, None
        logps = recorder.finish(new).tolist()
        return completions, [row[: len(c)] for row, c in zip(logps, completions)]

    def _static_cache(self, batch: int, prompt_len: int) -> StaticCache:
        assert self.static_cache_len is not None
        needed = prompt_len + (self.generation_config.max_new_tokens or 0)
        if needed > self.static_cache_len:
            raise ValueError(
                f"rollout: a {prompt_len}-token prompt plus {self.generation_config.max_new_tokens} new tokens does "
                f"not fit the static cache of {self.static_cache_len} positions (algo.max_prompt_length too small?)"
            )
        cache = self._caches.get(batch)
        if cache is None:
            cache = self._caches[batch] = static_cache(self.model.config, self.static_cache_len)
        else:
            cache.reset()
        return cache
