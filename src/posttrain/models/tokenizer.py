"""Offline byte-level tokenizers carrying each family's special tokens (for the tiny random-init models)."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

from posttrain.paths import CHAT_TEMPLATE_DIR

# Special tokens of the real tokenizers (names only; ids differ from the real vocabularies).
SPECIAL_TOKENS = {
    "llama": [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|finetune_right_pad_id|>",
    ],
    "gpt_oss": [
        "<|startoftext|>",
        "<|endoftext|>",
        "<|start|>",
        "<|end|>",
        "<|message|>",
        "<|channel|>",
        "<|constrain|>",
        "<|return|>",
        "<|call|>",
    ],
}
# bos, eos (end of an assistant turn: what generation stops on), pad
ROLE_TOKENS = {
    "llama": ("<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>"),
    "gpt_oss": ("<|startoftext|>", "<|return|>", "<|endoftext|>"),
}


def chat_template(name: str) -> str:
    path = CHAT_TEMPLATE_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"chat template {name!r} not found in {CHAT_TEMPLATE_DIR}")
    return path.read_text()


def build_byte_tokenizer(family: str, chat_template_name: str | None = None) -> PreTrainedTokenizerFast:
    """256 byte tokens + the family's special tokens; lossless for any UTF-8 text, no files needed."""
    byte_vocab = {ch: i for i, ch in enumerate(ByteLevel.alphabet())}
    byte_vocab = {ch: i for i, ch in enumerate(sorted(byte_vocab, key=lambda c: ord(c)))}
    tok = Tokenizer(models.BPE(vocab=byte_vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    bos, eos, pad = ROLE_TOKENS[family]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        additional_special_tokens=[t for t in SPECIAL_TOKENS[family] if t not in (bos, eos, pad)],
        padding_side="left",
        model_max_length=4096,
    )
    if chat_template_name:
        fast.chat_template = chat_template(chat_template_name)
    return fast
