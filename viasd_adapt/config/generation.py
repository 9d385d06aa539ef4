"""The ``viasd generate --json`` file: one generation, what it ran with and what it committed.

Read back by scripts and by later versions of viasd-adapt, so typed and versioned like every
artifact (:mod:`viasd_adapt.config.schema`): the tokens with the tier that committed each, the
text, the run's metrics, the settings it ran with and the sampling, the files it used, and the
time it took.
"""

from __future__ import annotations

from typing import Any, ClassVar

from viasd_adapt.config.schema import Artifact, TierSettingsField


class GenerationRecord(Artifact):
    """One ``viasd generate`` run (module docstring). ``tiers`` holds each committed token's tier
    (1 draft, 2 slim, 3 full; empty where the framework does not say)."""

    FORMAT: ClassVar[str] = "viasd-adapt/generation"
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "viasd generate --json file"

    framework: str
    mode: str
    prompt: str | None
    prompt_ids: list[int]
    tokens: list[int]
    tiers: list[int]
    text: str
    metrics: dict[str, Any] | None = None
    settings: TierSettingsField
    sampling: dict[str, Any]
    paths: dict[str, str | None]
    seconds: float


__all__ = ["GenerationRecord"]
