"""``build_report.json``: what ``viasd models build`` measured when it built a pair, typed and versioned.

Two builders write one (:mod:`viasd_adapt.training.build`, a stdlib pair trained from scratch;
:mod:`viasd_adapt.training.distill_build`, a drafter and an EAGLE head distilled for a real target);
``viasd models build`` prints from it, and a rebuild reads its ``preset`` to know that a folder is
an earlier build of the same preset. Each kind has its class, so that a reader asks for the
sections it prints and a missing one is refused naming the file and the field:

* :class:`BuildReport`: what every report may say (the preset's name, seed, threads, timings);
  any build report loads as one, the shipped ones included;
* :class:`PairBuildReport`: a stdlib pair's (held-out losses, the drafter's acceptance);
* :class:`DistilledBuildReport`: a distilled drafter's (its held-out agreement, the EAGLE head's).

Reports written before the format tag existed carry none (the shipped ones): they are read as
version 1. Everything else a builder records (parameter counts, random masks, versions) is kept
as written.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from viasd_adapt.config.schema import Artifact, SparseRecord, read_json

BUILD_REPORT_FILENAME = "build_report.json"


class BuildPreset(SparseRecord):
    """The preset a pair was built with (its name identifies an earlier build of it)."""

    name: str


class HeldoutLoss(SparseRecord):
    """Per-token cross-entropy of each model on held-out code (nats)."""

    target: float
    draft: float


class DrafterAcceptance(SparseRecord):
    """How often speculative decoding with the built drafter accepts its drafts."""

    speculative_acceptance_rate: float
    token_match_rate: float | None = None


class DistilledHeldout(SparseRecord):
    """The distilled drafter against its target on held-out examples."""

    top1_agreement: float
    draft_vocab_coverage: float


class DistilledDrafter(SparseRecord):
    heldout: DistilledHeldout


class EagleHeadReport(SparseRecord):
    heldout_top1_agreement_draft_vocab: float


class BuildReport(Artifact):
    """Any ``build_report.json`` (module docstring); every section is optional here."""

    FORMAT: ClassVar[str] = "viasd-adapt/build-report"
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "build report"
    READS_UNTAGGED: ClassVar[bool] = True

    preset: BuildPreset | None = None
    seed: int | None = None
    threads: int | None = None
    build_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as its builder gave it (no section it did not have), tagged."""
        data = self.model_dump(mode="json", exclude_unset=True)
        data.pop("format", None)
        data.pop("version", None)
        return {"format": self.FORMAT, "version": self.VERSION, **data}

    @classmethod
    def load(cls, path: str | os.PathLike) -> Any:
        """Reads ``path`` as this kind of report; errors name the file and the field."""
        return cls.from_json(read_json(path, cls.WHAT), source=f"build report {path}")


class PairBuildReport(BuildReport):
    """A stdlib pair's report (:mod:`viasd_adapt.training.build`)."""

    build_seconds: float
    heldout_loss: HeldoutLoss
    drafter_acceptance: DrafterAcceptance


class DistilledBuildReport(BuildReport):
    """A distilled drafter's report (:mod:`viasd_adapt.training.distill_build`); the EAGLE head's
    section only when one was trained."""

    build_seconds: float
    drafter: DistilledDrafter
    eagle_head: EagleHeadReport | None = None


__all__ = ["BUILD_REPORT_FILENAME", "BuildPreset", "BuildReport", "DistilledBuildReport", "PairBuildReport"]
