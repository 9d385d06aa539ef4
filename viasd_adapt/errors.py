"""Errors raised on bad input.

Every user-facing failure derives from :class:`ViasdError` so that the CLI can print one clean
line instead of a stack trace from deep inside torch.
"""


class ViasdError(Exception):
    """Base class for every error viasd-adapt raises on purpose."""


class ConfigError(ViasdError, ValueError):
    """A setting is out of range or inconsistent (thresholds, ratios, lengths)."""


class ModelMismatchError(ViasdError, ValueError):
    """Two artifacts do not belong together (tokenizers, masks, heads, models)."""


class UnsupportedModelError(ViasdError, TypeError):
    """A model architecture that viasd-adapt does not know how to route."""


__all__ = ["ConfigError", "ModelMismatchError", "UnsupportedModelError", "ViasdError"]
