"""Trainer callbacks shared by every algorithm (metrics file, guards)."""

from posttrain.callbacks.metrics import JsonlMetricsCallback, read_metrics, summary_stats

__all__ = ["JsonlMetricsCallback", "read_metrics", "summary_stats"]
