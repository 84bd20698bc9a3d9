"""Training guards shared by every algorithm: stop loudly instead of training on garbage."""

from __future__ import annotations

import torch

from posttrain.errors import TrainingError


def check_finite_loss(loss: torch.Tensor, step: int) -> None:
    """Raise TrainingError naming the (1-based) optimizer step when the loss is NaN or inf."""
    if not bool(torch.isfinite(loss.detach()).all()):
        raise TrainingError(f"non-finite loss ({float(loss.detach().float().mean())}) at step {step}")


def check_finite_weights(model: torch.nn.Module, step: int) -> None:
    """Raise `TrainingError` naming the first trainable parameter with a NaN/inf (a diverged update)."""
    for name, param in model.named_parameters():
        if param.requires_grad and not bool(torch.isfinite(param.detach()).all()):
            raise TrainingError(
                f"non-finite weights ({name}) at step {step}: training diverged at step {step - 1} (lower trainer.lr?)"
            )
