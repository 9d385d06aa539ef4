"""The records a model cache writes beside what it holds, as typed artifacts.

A cache folder is read back by later runs, later versions of viasd-adapt and, when damaged, by
the person who has to say what went wrong. So what it says about itself (what it was built from,
the digest of each file it holds) is a typed, versioned artifact like every other file the
project writes: fields checked on reading, errors naming the file and the field.

* :class:`SharedDrafterMarker`: ``viasd_drafter.json`` of a shared-embedding drafter folder
  (:mod:`viasd_adapt.models.shared_drafter`): which target it completes itself from.
* :class:`GGUFCacheRecord`: ``gguf_source.json`` of a dequantized GGUF file
  (:mod:`viasd_adapt.models.gguf`): the file, its sha256, the transformers that read it, each
  written file's digest.
* :class:`CompletedHeadDigests`: ``viasd_digests.json`` of an EAGLE head completed with its base
  model's embedding (:mod:`viasd_adapt.training.eagle_distill`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from viasd_adapt.config.schema import Artifact


class SharedDrafterMarker(Artifact):
    """The marker of a shared-embedding drafter: the target it was distilled from (its vocabulary
    size and weight fingerprint) and the target token ids its own head scores. The build's record
    (training figures) is kept as extra fields."""

    FORMAT: ClassVar[str] = "viasd-adapt/shared-embedding-drafter"
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "drafter marker"

    embedding: str = "target"
    vocab_size: int
    draft_vocab: list[int]
    target_fingerprint: dict[str, Any]


class GGUFCacheRecord(Artifact):
    """What a dequantized GGUF cache folder was made from, and the digest of each file in it.

    ``cache`` is the layout version of the folder (a newer layout makes an older folder stale);
    files written before this artifact carried it as ``format`` (an integer), which is read the
    same way (:meth:`from_json`)."""

    FORMAT: ClassVar[str] = "viasd-adapt/gguf-cache"
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "GGUF cache record"

    cache: int
    file: str
    sha256: str
    transformers: str
    #: the dtype the entry's weights are saved in; records written before entries had dtypes are float32
    dtype: str = "float32"
    files: dict[str, str]

    @classmethod
    def from_json(cls, data: Any, source: str | None = None) -> "GGUFCacheRecord":
        if isinstance(data, dict) and isinstance(data.get("format"), int):  # the untyped record of earlier versions
            data = {**data, "cache": data["format"], "format": cls.FORMAT}
        return super().from_json(data, source)


class CompletedHeadDigests(Artifact):
    """The sha256 of each file of a completed EAGLE head, recorded when it was written."""

    FORMAT: ClassVar[str] = "viasd-adapt/eagle-head-digests"
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "completed EAGLE head digests"

    files: dict[str, str]


__all__ = ["CompletedHeadDigests", "GGUFCacheRecord", "SharedDrafterMarker"]
