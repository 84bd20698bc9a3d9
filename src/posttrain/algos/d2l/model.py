"""`D2LModel`: frozen base LM + context encoder + trainable hypernet, with the Python API
`internalize(doc) -> lora`, `generate(prompt, lora)`, `reset()`, and pickle-free save/load
(`hypernet.safetensors` + `hypernet_config.json`)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import torch
from omegaconf import DictConfig
from safetensors.torch import load_file, save_file
from torch import nn

from posttrain.algos.d2l.config import encoder_depth, target_layers
from posttrain.algos.d2l.encoder import ContextEncoder, backbone_of
from posttrain.algos.d2l.hypernet import Hypernet, HypernetSpec
from posttrain.algos.d2l.lora import D2LLinear, GeneratedLoRA, find_targets, install, set_lora, unwrapped
from posttrain.data.chat import IGNORE_INDEX
from posttrain.errors import CheckpointError

WEIGHTS, SPEC = "hypernet.safetensors", "hypernet_config.json"


class D2LOutput(NamedTuple):
    """`D2LModel.forward`'s result; `other`/`other_base` only with the other-entity view."""

    logits: torch.Tensor
    lora: GeneratedLoRA
    other: torch.Tensor | None = None
    other_base: torch.Tensor | None = None


class D2LModel(nn.Module):
    """What HF Trainer trains: only `hypernet` has trainable parameters; the base LM is frozen.

    The base LM is registered (so `.to()` moves it) but `hypernet_state_dict()` is what checkpoints hold.
    """

    wrappers: dict[str, D2LLinear]  # the wrapped base layers (kept out of the module tree: not parameters)

    def __init__(
        self,
        base: nn.Module,
        tokenizer: Any,
        spec: HypernetSpec,
        share_encoder_weights: bool = True,
        max_doc_length: int = 256,
        max_chunks: int = 1,
        chunking: str = "tokens",
    ):
        super().__init__()
        # how `internalize` reads a document: chunks of at most max_doc_length tokens split by `chunking`, at most
        # max_chunks (the rest is cut): `posttrain.data.d2l.document_chunks`
        self.max_doc_length, self.max_chunks, self.chunking = max_doc_length, max_chunks, chunking
        base.requires_grad_(False)
        base.eval()
        self.base = base
        self.tokenizer = tokenizer
        self.encoder = ContextEncoder(base, spec.encoder_depth, share_encoder_weights)  # before wrapping
        layers: nn.ModuleList = backbone_of(base).layers  # type: ignore[assignment]
        targets = find_targets(layers, spec.layers, spec.modules)
        spec.paths = {f"{li}.{m}": path for path, (li, m, _) in targets.items()}
        self.__dict__["wrappers"] = install(layers, targets, spec.alpha / spec.rank)
        # fp32 master weights whatever the base's dtype, as PEFT keeps LoRA adapters fp32 on a bf16 base: in bf16,
        # Adam's steps round away (at lr 1e-4, two steps leave scale_A and the LayerNorm weights, all 1.0, unchanged).
        # The trainer's autocast runs its matmuls in bf16.
        self.hypernet = Hypernet(spec).float()
        self.spec = spec

    # -- the frozen base stays in eval mode (no dropout), except that HF layers only checkpoint in train mode ------
    def train(self, mode: bool = True) -> D2LModel:
        self.training = mode
        self.hypernet.train(mode)
        self.base.train(mode and self.is_activation_checkpointing)
        return self

    # -- gradient (activation) checkpointing is the base model's ---------------------------------------------------
    def activation_checkpointing_enable(
        self, activation_checkpointing_kwargs: dict | None = None, **kwargs: Any
    ) -> None:
        if hasattr(self.base, "activation_checkpointing_enable"):
            self.base.activation_checkpointing_enable(activation_checkpointing_kwargs, **kwargs)
        else:  # older transformers
            self.base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=activation_checkpointing_kwargs)

    def activation_checkpointing_disable(self) -> None:
        fn = getattr(self.base, "activation_checkpointing_disable", None) or self.base.gradient_checkpointing_disable
        fn()

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs)

    gradient_checkpointing_disable = activation_checkpointing_disable

    @property
    def is_activation_checkpointing(self) -> bool:
        flag = getattr(self.base, "is_activation_checkpointing", None)
        return bool(getattr(self.base, "is_gradient_checkpointing", False) if flag is None else flag)

    is_gradient_checkpointing = is_activation_checkpointing

    @property
    def device(self) -> torch.device:
        return next(self.hypernet.parameters()).device

    # -- generation of LoRAs ----------------------------------------------------------------------------------
    def reset(self) -> None:
        """Remove any applied LoRA: the base model is itself again."""
        set_lora(self.wrappers, None)

    @contextmanager
    def plain_base(self) -> Iterator[nn.Module]:
        """`base` exactly as loaded, without the generated-LoRA wrappers, for the duration (adapter baselines)."""
        self.reset()
        with unwrapped(backbone_of(self.base).layers, self.wrappers):  # type: ignore[arg-type]  # a ModuleList
            yield self.base

    def apply_lora(self, lora: GeneratedLoRA | None, token_index: torch.Tensor | None = None) -> None:
        """Apply `lora` (one per batch row, or one per packed segment with `token_index[b, t]`) until `reset()`."""
        set_lora(self.wrappers, lora, token_index)

    def lora_from_ids(
        self, ctx_ids: torch.Tensor, ctx_mask: torch.Tensor, ctx_doc: torch.Tensor | None = None
    ) -> GeneratedLoRA:
        """One LoRA per document from document chunks (rows of `ctx_ids`; `ctx_doc[c]`: chunk c's document)."""
        self.reset()  # the encoder shares the base's layers: encode with no LoRA applied
        feats = self.encoder(ctx_ids, ctx_mask)
        return self.hypernet(feats, ctx_mask, ctx_doc)

    def forward(
        self,
        ctx_ids: torch.Tensor,
        ctx_mask: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor,
        token_index: torch.Tensor | None = None,
        ctx_doc: torch.Tensor | None = None,
        o_input_ids: torch.Tensor | None = None,
        o_attention_mask: torch.Tensor | None = None,
        o_labels: torch.Tensor | None = None,
    ) -> D2LOutput:
        """fp32 logits `[n, V]` at the n positions predicting a labelled token of `labels` (row-major), with each
        row's generated LoRA applied; the LoRA itself; and with the other-entity view `o_*` (`locality.py`), the
        logits at its labelled positions with the same row's LoRA and without any (the latter without gradient).

        The LM head runs here, not in the loss: the trainer's bf16 autocast (and a distributed wrapper) cover the
        model's forward only, and outside it the head would meet hidden states of another dtype."""
        lora = self.lora_from_ids(ctx_ids, ctx_mask, ctx_doc)  # no LoRA is applied after this
        other = other_base = None
        if o_input_ids is not None:
            if token_index is not None:
                raise ValueError("the other-entity view is per row: it cannot go with packed sequences")
            with torch.no_grad():
                other_base = self._labelled_logits(o_input_ids, o_attention_mask, o_labels)
        # one LoRA state for both forwards below: gradient checkpointing re-runs them with it during backward
        self.apply_lora(lora, token_index)
        logits = self._labelled_logits(input_ids, attention_mask, labels)
        if o_input_ids is not None:
            other = self._labelled_logits(o_input_ids, o_attention_mask, o_labels)
        return D2LOutput(logits, lora, other, other_base)

    def _labelled_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, labels: torch.Tensor | None
    ) -> torch.Tensor:
        if attention_mask is None or labels is None:
            raise ValueError("a view needs its attention mask and labels")
        out = backbone_of(self.base)(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        sel = labels[:, 1:] != IGNORE_INDEX
        return self.base.get_output_embeddings()(out.last_hidden_state[:, :-1][sel]).float()

    @property
    def reading(self) -> dict[str, Any]:
        """How this model reads a document: the keyword arguments of `document_chunks` and `featurize`."""
        return {"max_doc_length": self.max_doc_length, "max_chunks": self.max_chunks, "chunking": self.chunking}

    def tokenize_docs(self, docs: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(chunk ids, chunk mask, chunk -> document) for `docs`, read as in training (`featurize`)."""
        from posttrain.data.d2l import document_chunks

        chunks, doc = [], []
        for i, d in enumerate(docs):
            parts = document_chunks(d, self.tokenizer, **self.reading)[0] or [[]]
            chunks += parts
            doc += [i] * len(parts)
        width = max(len(x) for x in chunks)
        pad = self.tokenizer.pad_token_id
        tensor = torch.tensor([x + [pad] * (width - len(x)) for x in chunks], device=self.device)
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in chunks], device=self.device)
        return tensor, mask, torch.tensor(doc, device=self.device)

    @torch.no_grad()
    def internalize(self, doc: str | Sequence[str]) -> GeneratedLoRA:
        """The LoRA for a document (or one per document of a list), detached."""
        docs = [doc] if isinstance(doc, str) else list(doc)
        return self.lora_from_ids(*self.tokenize_docs(docs)).detach()

    @torch.no_grad()
    def generate(
        self,
        prompt: str | Sequence[str],
        lora: GeneratedLoRA | None = None,
        max_new_tokens: int = 32,
        **gen_kwargs: Any,
    ) -> str | list[str]:
        """Greedy chat completion(s) of the base model with `lora` applied (None: the bare base model)."""
        from posttrain.models.generation import generate

        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        convs = [[{"role": "user", "content": p}] for p in prompts]
        self.apply_lora(lora)  # one LoRA per prompt: the whole list is one batch
        try:
            answers, _ = generate(
                self.base, self.tokenizer, convs, max_new_tokens=max_new_tokens, batch_size=len(convs), **gen_kwargs
            )
        finally:
            self.reset()
        return answers[0] if isinstance(prompt, str) else answers

    # -- checkpoints: safetensors + JSON, no pickles -----------------------------------------------------------
    def hypernet_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().contiguous() for k, v in self.hypernet.state_dict().items()}

    def save_hypernet(self, directory: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """`state_dict`: this model's whole state dict, gathered from a sharded engine's ranks (FSDP, ZeRO-3), where
        the parameters on this process are shards."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = self.hypernet_state_dict()
        if state_dict is not None:
            state = {
                k.removeprefix("hypernet."): v.contiguous() for k, v in state_dict.items() if k.startswith("hypernet.")
            }
        save_file(state, str(directory / WEIGHTS))
        (directory / SPEC).write_text(json.dumps(self.spec.to_dict(), indent=2))

    def load_hypernet(self, directory: str | Path) -> None:
        directory = Path(directory)
        if not (directory / WEIGHTS).is_file() or not (directory / SPEC).is_file():
            raise CheckpointError(f"{directory}: no {WEIGHTS} + {SPEC} (not a D2L checkpoint)")
        saved = json.loads((directory / SPEC).read_text())
        mine = self.spec.to_dict()
        diff = sorted(k for k in mine if k != "paths" and saved.get(k) != mine[k])
        if diff:
            raise CheckpointError(f"{directory}: hypernet config differs from this run in {', '.join(diff)}")
        state = load_file(str(directory / WEIGHTS), device=str(self.device))
        self.hypernet.load_state_dict(state, strict=True)


def hypernet_spec(cfg: DictConfig, base: nn.Module) -> HypernetSpec:
    algo, agg = cfg.algo, cfg.algo.aggregator
    layers = target_layers(cfg)
    found = find_targets(backbone_of(base).layers, layers, list(algo.target_modules))  # type: ignore[arg-type]
    dims: dict[str, list[int]] = {}
    for _, (li, m, mod) in found.items():
        d = [int(mod.in_features), int(mod.out_features)]  # type: ignore[arg-type]
        if dims.setdefault(m, d) != d:
            raise ValueError(
                f"{m} has shape {d} in layer {li} but {dims[m]} elsewhere: one head per module needs one shape"
            )
    return HypernetSpec(
        hidden_size=int(base.config.hidden_size),  # type: ignore[arg-type]
        layers=layers,
        modules=list(algo.target_modules),
        dims=dims,
        rank=algo.rank,
        alpha=float(algo.alpha),
        per_rank_gen=algo.per_rank_gen,
        per_layer_processing=algo.per_layer_processing,
        bias_lora_rank=algo.bias_lora_rank,
        encoder_depth=encoder_depth(cfg),
        num_blocks=agg.num_blocks,
        latent_size=agg.latent_size,
        num_heads=agg.num_heads,
        mlp_ratio=agg.mlp_ratio,
    )


def build_model(cfg: DictConfig) -> D2LModel:
    """Base model (no PEFT adapters) + hypernet for `cfg`; the hypernet is seeded by `cfg.seed`."""
    from posttrain.models import load

    base, tokenizer = load(cfg, with_lora=False)
    spec = hypernet_spec(cfg, base)
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed)
        enc = cfg.algo.encoder
        model = D2LModel(
            base,
            tokenizer,
            spec,
            share_encoder_weights=enc.share_weights,
            max_doc_length=enc.max_doc_length,
            max_chunks=enc.max_chunks,
            chunking=enc.chunking,
        )
    return model


def hypernet_parameter_count(cfg: DictConfig) -> int:
    """Parameters of the hypernet `cfg` builds, counted from the module itself (base and hypernet on the meta
    device: no weights load), so the memory plan cannot drift from the model."""
    import warnings

    from transformers import AutoModelForCausalLM

    from posttrain.models import hf_config

    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = AutoModelForCausalLM.from_config(hf_config(cfg.model))
        hypernet = Hypernet(hypernet_spec(cfg, base))
    return sum(p.numel() for p in hypernet.parameters())
