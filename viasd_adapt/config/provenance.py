"""Where a run's setting came from, as a typed value: its kind, and the words ``--explain`` prints.

The resolver (:func:`viasd_adapt.config.resolve.read_settings`) records a :class:`Source` for every
setting. Code asks a source its :attr:`Source.kind` (was it tuned.json's? a flag?); people read its
text (``str(source)``: ``"flag --alpha1"``, ``"tuned.json .../tuned.json (choice lenient)"``), which
is all a source used to be. Why typed: a source that is only a sentence has to be parsed back
(``source.startswith("tuned.json")``), and rewording the sentence silently changed what the code
decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path


class SourceKind(Enum):
    """Which layer set a value (:mod:`viasd_adapt.config.resolve`'s layers, and the caller)."""

    #: nobody set it: TierSettings' default
    DEFAULT = "default"
    #: tuned.json: its choice, or one of the tuner's best points
    TUNED = "tuned"
    #: ``--preset``
    PRESET = "preset"
    #: a command-line flag
    FLAG = "flag"
    #: a rule of the run (``--framework ar`` forces mode none; a first run without a mask runs untiered)
    RULE = "rule"
    #: the caller passed the settings themselves (``settings=``): nothing was resolved
    GIVEN = "given"


@dataclass(frozen=True)
class Source:
    """Where one setting came from: its kind, and the words that say so (``str(source)``)."""

    kind: SourceKind
    text: str

    def __str__(self) -> str:
        return self.text

    @classmethod
    def tuned(cls, path: Path | str | None, what: str) -> "Source":
        """tuned.json at ``path``; ``what``: its choice (``"choice lenient"``) or a best point."""
        return cls(SourceKind.TUNED, f"tuned.json {path} ({what})")

    @classmethod
    def preset(cls, name: str) -> "Source":
        return cls(SourceKind.PRESET, f"preset {name}")

    @classmethod
    def flag(cls, name: str) -> "Source":
        """The flag that sets the field ``name`` (``alpha1`` -> ``--alpha1``, ``greedy_gates`` -> ``--greedy-gates``)."""
        return cls(SourceKind.FLAG, f"flag --{name.replace('_', '-')}")

    @classmethod
    def rule(cls, words: str) -> "Source":
        return cls(SourceKind.RULE, words)


#: The source of a value nobody set.
DEFAULT_SOURCE = Source(SourceKind.DEFAULT, "default")
#: The source of a setting the caller gave (``settings=``: no resolution).
GIVEN_SOURCE = Source(SourceKind.GIVEN, "given")


__all__ = ["DEFAULT_SOURCE", "GIVEN_SOURCE", "Source", "SourceKind"]
