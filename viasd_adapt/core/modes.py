"""The one table of modes: what each mode is, in one row, read by everything that asks.

A mode is how the slim tier may influence the output (:class:`Mode`). What a mode *is* lives in its
row (:class:`ModeRow`), and nowhere else:

* ``rule``: which acceptance rule judges what (:class:`ModeRules`; :func:`viasd_adapt.core.rules.rule_for`
  reads it): the first verifier's check of the drafts, and the full verifier's check after it;
* ``path``: which decision the cycle runs (:class:`CyclePath`: q alone, the lossless cascade, or the
  three tiers). The core's cycle (:func:`viasd_adapt.core.cycle.decide_cycle`) and EAGLE's tree
  decision each map a path to their function, once; neither names a mode;
* ``reads``: the settings only some modes read (the gates' tolerances, the lenient tolerance,
  ``adaptive``): :meth:`RunSpec.refuse_unread_flags <viasd_adapt.config.resolve.RunSpec.refuse_unread_flags>`
  refuses a flag the mode does not read, and the adaptive tier's priors
  (:mod:`viasd_adapt.engine.priors`) compare a measured point with the run on them;
* ``adaptive``: whether the adaptive tier may choose, cycle by cycle, between the slim tier and
  untiered verification (:attr:`TierSettings.adapts <viasd_adapt.core.settings.TierSettings.adapts>`);
* ``exact``: whether the output distribution is exactly the target's; ``scores``: whether a cycle
  scores each committed token against q (audit, and lenient, which has q at hand);
* ``name``: the one name, used by ``--mode``, tuned.json, reports and bench rows (a mode that
  adapts also names its tier on every cycle, ``<name>-fixed``: :func:`viasd_adapt.core.settings.mode_label`).

A program adds a mode with :func:`register_mode` (a row, and, when its rule is a new hook, a rules
plugin that answers it: the hook is named by the row's :class:`Check` and specified by
:func:`viasd_adapt.core.hooks.make_plugin_manager` with the arguments of the rules of its verifier);
:func:`registered_mode` scopes it to a ``with`` block. The built-in rows cannot be replaced. Why a table: a mode used to be an
``if``/``elif`` in the cycle, another in EAGLE, a list of the settings it reads in the resolver and
another in the priors; adding one meant finding them all (docs/architecture.md, "Adding a mode").

This module imports neither torch nor any other module of the package but the errors, so that the
settings (and with them tuned.json and the vLLM plugin's config) stay importable without torch.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterator

from viasd_adapt.errors import ConfigError


class Mode(str, Enum):
    """How the slim tier is allowed to influence the output (each mode's row: :data:`BUILTIN_ROWS`).

    * ``NONE``: the framework runs as if viasd-adapt were not there (untiered lossless SD; the
      baseline rows).
    * ``LENIENT``: no slim tier either, and q accepts a draft x when ``q(x) >= (1 - a) p(x)``
      with ``a = TierSettings.lenience``. The simple lossy baseline every VIA-SD figure is
      compared with: if it gives equal fidelity for less, the tier has not earned its place.
      ``lenience = 0`` is exactly ``NONE``.
    * ``LOSSLESS``: the slim verifier is an intermediate proposer (p -> u -> q); q verifies every
      committed token, so the output distribution is exactly the target's.
    * ``LOSSY``: the paper's three-tier rule; q runs only on escalation.
    * ``AUDIT``: lossy decisions, with q run in shadow every cycle to measure what lossy cost.

    A mode added with :func:`register_mode` is a member too while its row is registered
    (``Mode("toy")``), though ``list(Mode)`` names the built-in ones only.
    """

    NONE = "none"
    LENIENT = "lenient"
    LOSSLESS = "lossless"
    LOSSY = "lossy"
    AUDIT = "audit"

    @classmethod
    def _missing_(cls, value: object) -> "Mode | None":
        return _ADDED_MEMBERS.get(value) if isinstance(value, str) else None

    @property
    def row(self) -> "ModeRow":
        """This mode's row of the table."""
        return mode_row(self)

    @property
    def uses_slim(self) -> bool:
        """Whether this mode runs the slim verifier (and so needs a routing mask): its path does."""
        return self.row.path.uses_slim

    @property
    def is_exact(self) -> bool:
        """Whether the output distribution is exactly the target's (greedy: its argmax)."""
        return self.row.exact

    @classmethod
    def parse(cls, value: "Mode | str") -> "Mode":
        if isinstance(value, Mode):
            return value
        if not isinstance(value, str):  # str(None) would read as "none"
            raise ConfigError(f"mode must be one of: {', '.join(mode_names())} (a string or a Mode), got {value!r}")
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ConfigError(f"unknown mode {value!r}; choose one of: {', '.join(mode_names())}") from None


class CyclePath(Enum):
    """Which decision a cycle runs (:func:`viasd_adapt.core.cycle.decide_cycle`)."""

    #: q alone verifies the drafts (none, lenient)
    FULL_ONLY = "full-only"
    #: p -> u -> q: u verifies the drafts, q verifies u's candidates (lossless)
    CASCADE = "cascade"
    #: gate 1 (p -> u), the router, and escalation to q only when u is unsure (lossy, audit)
    THREE_TIERS = "three-tiers"

    @property
    def uses_slim(self) -> bool:
        """Whether the path runs the slim verifier."""
        return self is not CyclePath.FULL_ONLY


@dataclass(frozen=True)
class Check:
    """One acceptance rule asked of one verifier: the rule hook, and whose rows it reads (``"slim"``:
    u, ``"full"``: q). :meth:`accept_prob` is the one place that maps rows to a hook's arguments."""

    hook: str
    verifier: str

    def accept_prob(self, rules: Any, tokens: Any, p: Any, rows: Any, settings: Any, greedy: bool) -> Any:
        """Asks ``rules`` (:data:`~viasd_adapt.core.rules.BUILTIN_RULES` or a plugin manager's hook
        relay) whether the verifier whose ``rows`` are given (one per draft, and maybe the bonus row)
        accepts each of ``tokens`` drawn from ``p``. A hook that no rules object answers (a mode's
        new rule without its plugin) is refused by name."""
        ask = getattr(rules, self.hook, None)
        if ask is None:
            raise ConfigError(self._unanswered(settings))
        if self.hook == "viasd_lossless_accept_prob":
            answer = ask(tokens=tokens, proposer=p, verifier=rows[: tokens.shape[0]], greedy=greedy)
        else:
            rows_name = "u" if self.verifier == "slim" else "q"
            answer = ask(tokens=tokens, p=p, settings=settings, greedy=greedy, **{rows_name: rows})
        if answer is None:
            raise ConfigError(self._unanswered(settings))
        return answer

    def _unanswered(self, settings: Any) -> str:
        mode = getattr(getattr(settings, "mode", None), "value", "this mode")
        return (f"no rules plugin answers the rule hook {self.hook!r} that mode {mode} asks; pass the plugin that "
                "implements it (plugins=[...]) to the run")

    def every_token_accept_prob(self, rules: Any, p_row: Any, verifier_row: Any, settings: Any) -> Any:
        """``(V,)``: the sampling acceptance probability of each token of the vocabulary, drafted at one
        position whose drafter and verifier distributions are ``p_row`` and ``verifier_row``.

        What the audit needs to write down the distribution a cycle commits from. The rule is asked
        with the vocabulary as the tokens and the two rows repeated (views, not copies), which a rule
        that decides each position from its own rows answers exactly
        (:class:`~viasd_adapt.core.rules.TierRules`).
        """
        import torch  # here, not at the top: the table is read without torch

        vocab = p_row.shape[-1]
        tokens = torch.arange(vocab, device=p_row.device)
        return self.accept_prob(rules, tokens, p_row.expand(vocab, vocab), verifier_row.expand(vocab + 1, vocab),
                                settings, greedy=False)


LOSSLESS_ON_SLIM = Check("viasd_lossless_accept_prob", "slim")
LOSSLESS_ON_FULL = Check("viasd_lossless_accept_prob", "full")
LENIENT_ON_FULL = Check("viasd_lenient_accept_prob", "full")
GATE1_ON_SLIM = Check("viasd_gate1_accept_prob", "slim")
ESCALATION_ON_FULL = Check("viasd_escalation_accept_prob", "full")


@dataclass(frozen=True)
class ModeRules:
    """The checks of one mode: ``drafts``, the first verifier's check of the drafts, and ``then``,
    the full verifier's check after it (lossless: of the cascade's candidates; lossy and audit:
    escalation; None where q is the first verifier). The router (lossy, audit) is its own pair of
    hooks, asked by :func:`viasd_adapt.core.tiers.route_block`."""

    drafts: Check
    then: Check | None = None


#: The settings only some modes read, and what each is for (the others every mode reads).
SETTING_ROLES = {
    "adaptive": "the tier chosen cycle by cycle",
    "alpha1": "gate 1's tolerance",
    "alpha2": "gate 2's tolerance",
    "lenience": "the lenient rule's tolerance",
}


@dataclass(frozen=True)
class ModeRow:
    """One mode: everything the library knows of it (module docstring).

    Attributes:
        name: the mode's one name (``--mode``, tuned.json, reports, bench rows); lower case.
        rule: the checks it applies (:func:`viasd_adapt.core.rules.rule_for` returns it).
        path: the decision a cycle runs.
        reads: the settings it reads among those only some modes read (:data:`SETTING_ROLES`), and
            those its decisions depend on beyond the block length (``greedy_gates``,
            ``escalation_rule``): what a measured point must share with a run to be its prior.
        adaptive: whether the adaptive tier may switch its slim tier off, cycle by cycle (then it
            reads ``adaptive``, and its tier on every cycle is the row ``<name>-fixed``).
        exact: whether the output distribution is exactly the target's.
        scores: whether a cycle scores each committed token against q (the audit record).
    """

    name: str
    rule: ModeRules
    path: CyclePath
    reads: tuple[str, ...] = ()
    adaptive: bool = False
    exact: bool = False
    scores: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.lower() or " " in self.name:
            raise ConfigError(f"a mode's name must be a non-empty lower-case word, got {self.name!r}")
        if not isinstance(self.rule, ModeRules) or not isinstance(self.path, CyclePath):
            raise ConfigError(f"mode {self.name}: rule must be a ModeRules and path a CyclePath")
        if self.path is not CyclePath.FULL_ONLY and self.rule.then is None:
            raise ConfigError(f"mode {self.name}: the {self.path.value} path asks q's check after the first one "
                              "(ModeRules.then)")
        if self.adaptive and "adaptive" not in self.reads:
            object.__setattr__(self, "reads", ("adaptive", *self.reads))

    @property
    def mode(self) -> Mode:
        """The row's :class:`Mode`."""
        return Mode(self.name)


_THREE_TIER_READS = ("alpha1", "alpha2", "greedy_gates", "escalation_rule")

#: The built-in modes' rows.
BUILTIN_ROWS = (
    ModeRow("none", ModeRules(LOSSLESS_ON_FULL), CyclePath.FULL_ONLY, exact=True),
    ModeRow("lenient", ModeRules(LENIENT_ON_FULL), CyclePath.FULL_ONLY, reads=("lenience",), scores=True),
    ModeRow("lossless", ModeRules(LOSSLESS_ON_SLIM, LOSSLESS_ON_FULL), CyclePath.CASCADE, adaptive=True, exact=True),
    ModeRow("lossy", ModeRules(GATE1_ON_SLIM, ESCALATION_ON_FULL), CyclePath.THREE_TIERS, reads=_THREE_TIER_READS,
            adaptive=True),
    ModeRow("audit", ModeRules(GATE1_ON_SLIM, ESCALATION_ON_FULL), CyclePath.THREE_TIERS, reads=_THREE_TIER_READS,
            scores=True),
)

_ROWS: dict[str, ModeRow] = {row.name: row for row in BUILTIN_ROWS}
#: the Mode members of the rows a program added (``Mode("toy")``), by name
_ADDED_MEMBERS: dict[str, Mode] = {}


def _new_member(name: str) -> Mode:
    member = str.__new__(Mode, name)
    member._value_ = name
    member._name_ = name.upper().replace("-", "_")
    return member


def register_mode(row: ModeRow) -> Mode:
    """Adds ``row`` to the table and returns its :class:`Mode` (``TierSettings(mode=row.name)`` then
    runs it). A name already in the table is refused: a built-in mode is not replaced."""
    if not isinstance(row, ModeRow):
        raise ConfigError(f"register_mode takes a ModeRow, got {type(row).__name__}")
    if row.name in _ROWS:
        raise ConfigError(f"mode {row.name!r} is already in the table of modes")
    _ROWS[row.name] = row
    _ADDED_MEMBERS[row.name] = _new_member(row.name)
    return _ADDED_MEMBERS[row.name]


def unregister_mode(name: "Mode | str") -> None:
    """Takes an added mode out of the table (the built-in ones stay)."""
    key = name.value if isinstance(name, Mode) else str(name)
    if key not in _ADDED_MEMBERS:
        raise ConfigError(f"mode {key!r} was not added with register_mode")
    del _ROWS[key], _ADDED_MEMBERS[key]


@contextlib.contextmanager
def registered_mode(row: ModeRow) -> Iterator[Mode]:
    """:func:`register_mode` for the ``with`` block only (tests, and a program trying a mode)."""
    mode = register_mode(row)
    try:
        yield mode
    finally:
        unregister_mode(row.name)


def mode_row(mode: "Mode | str") -> ModeRow:
    """The row of ``mode`` (a :class:`Mode` or its name); an unknown one is refused by name."""
    key = mode.value if isinstance(mode, Mode) else mode
    row = _ROWS.get(key) if isinstance(key, str) else None
    if row is None:
        raise ConfigError(f"unknown mode {mode!r}; choose one of: {', '.join(mode_names())}")
    return row


def mode_rows() -> tuple[ModeRow, ...]:
    """Every row of the table, the built-in ones first."""
    return tuple(_ROWS.values())


def mode_names() -> tuple[str, ...]:
    """Every mode's name, as ``--mode`` takes it."""
    return tuple(_ROWS)


def adaptive_modes() -> tuple[Mode, ...]:
    """The modes the adaptive tier applies to."""
    return tuple(row.mode for row in _ROWS.values() if row.adaptive)


def modes_reading(setting: str) -> tuple[Mode, ...]:
    """The modes that read ``setting``."""
    return tuple(row.mode for row in _ROWS.values() if setting in row.reads)


def rule_checks() -> tuple[Check, ...]:
    """Every check a row of the table asks, each once."""
    checks = (check for row in _ROWS.values() for check in (row.rule.drafts, row.rule.then) if check is not None)
    return tuple(dict.fromkeys(checks))


__all__ = ["Check", "CyclePath", "Mode", "ModeRow", "ModeRules", "mode_row", "register_mode", "registered_mode"]
