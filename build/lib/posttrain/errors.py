"""User-facing errors: anything raised as a `UserError` is printed as one line and exits non-zero."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's config, data or files (not a bug): reported in one line, exit code 2."""

    exit_code = 2


class ConfigError(UserError):
    """A config value or combination that cannot work (checked before any model loads)."""


class DataError(UserError):
    """Bad or missing training/eval data."""


class CheckpointError(UserError):
    """A checkpoint that cannot be resumed from or loaded."""


class TrainingError(UserError):
    """Training stopped on a guard (NaN loss, all-masked labels, failing reward function)."""
