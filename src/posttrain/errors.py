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


class DiskFullError(UserError):
    """The disk filled while a run wrote (a checkpoint, metrics): the newest complete checkpoint is still whole."""


def is_disk_full(ex: BaseException) -> bool:
    """ENOSPC / EDQUOT, or torch's serializer failing to write (its "file write failed" / iostream errors)."""
    import errno

    if isinstance(ex, OSError) and ex.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(ex)
    return isinstance(ex, RuntimeError) and any(
        needle in text for needle in ("file write failed", "iostream error", "No space left on device")
    )
