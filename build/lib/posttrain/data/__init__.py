"""Datasets for each algorithm, built offline by the repo or loaded by name / from a local file."""

from posttrain.data.grpo import build_grpo_dataset

__all__ = ["build_grpo_dataset"]
