"""Config schemas, their registration with Hydra's ConfigStore, and cross-field validation."""

from posttrain.config.registry import register
from posttrain.config.validate import ConfigError, validate

__all__ = ["ConfigError", "register", "validate"]
