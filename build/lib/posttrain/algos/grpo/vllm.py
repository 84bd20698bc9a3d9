"""vLLM generation for GRPO goes through TRL (`use_vllm`, colocate or server); here only the import check."""

from __future__ import annotations

from posttrain.errors import UserError


def require_vllm() -> None:
    """vLLM is a GPU-only optional dependency: say in one line how to get it."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise UserError("algo.generation.backend=vllm needs vLLM: pip install -e '.[gpu]' on a CUDA machine") from None
