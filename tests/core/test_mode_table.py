"""The table of modes (core/modes.py) is what the library reads: the rule, the cycle path, the settings
a mode reads and whether it adapts. Each test changes one row (a mode added as a twin of a built-in
one, with one field different) and sees the reader follow the row, not the mode's name."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from viasd_adapt.config.resolve import mode_reads
from viasd_adapt.core.cycle import CyclePolicy, Verifiers, decide_cycle
from viasd_adapt.core.modes import BUILTIN_ROWS, CyclePath, Mode, mode_row, registered_mode
from viasd_adapt.core.rules import rule_for
from viasd_adapt.core.settings import TierSettings, label_settings, mode_label
from viasd_adapt.engine.priors import prior_fields
from viasd_adapt.errors import ConfigError

V = 6
DRAFTS = torch.tensor([1, 2, 3])
#: p, u, q: u agrees with the drafts, q accepts only the first draft (so the paths commit differently)
P = torch.full((3, V), 0.02).index_put_((torch.arange(3), DRAFTS), torch.tensor(0.9))
U = torch.full((5, V), 0.02).index_put_((torch.arange(3), DRAFTS), torch.tensor(0.9))
Q = torch.full((5, V), 0.02).index_put_((torch.arange(5), torch.tensor([1, 5, 5, 5, 5])), torch.tensor(0.9))


def _decide(mode: str, **settings) -> list[int]:
    policy = CyclePolicy(TierSettings(mode=mode, adaptive=False, **settings), greedy=True)
    outcome = decide_cycle(DRAFTS, P, Verifiers(full=lambda t: Q[: t.shape[0] + 1], slim=lambda t: U[: t.shape[0] + 1]), policy)
    return outcome.result.tokens


def test_the_built_in_rows_hold_what_the_modes_did_before_the_table():
    assert [row.name for row in BUILTIN_ROWS] == [m.value for m in Mode]
    assert {row.name: row.path for row in BUILTIN_ROWS} == {
        "none": CyclePath.FULL_ONLY, "lenient": CyclePath.FULL_ONLY, "lossless": CyclePath.CASCADE,
        "lossy": CyclePath.THREE_TIERS, "audit": CyclePath.THREE_TIERS}
    assert {name: {m.value for m in modes} for name, (modes, _) in mode_reads().items()} == {
        "adaptive": {"lossless", "lossy"}, "alpha1": {"lossy", "audit"}, "alpha2": {"lossy", "audit"},
        "lenience": {"lenient"}}
    assert prior_fields(Mode.LOSSLESS) == ("gamma",)
    assert prior_fields(Mode.LOSSY) == ("gamma", "alpha1", "alpha2", "greedy_gates", "escalation_rule")
    assert [m for m in Mode if TierSettings(mode=m).adapts] == [Mode.LOSSLESS, Mode.LOSSY]
    assert [m for m in Mode if m.is_exact] == [Mode.NONE, Mode.LOSSLESS]
    assert [m for m in Mode if m.uses_slim] == [Mode.LOSSLESS, Mode.LOSSY, Mode.AUDIT]
    for row in BUILTIN_ROWS:
        assert rule_for(row.name) is row.rule


def test_the_cycle_runs_the_path_the_row_names():
    lossy_twin = replace(mode_row("lossy"), name="lossy-twin")
    with registered_mode(lossy_twin):
        assert _decide("lossy-twin") == _decide("lossy")
    on_the_cascade = replace(mode_row("lossy"), name="lossy-cascade", path=CyclePath.CASCADE,
                             rule=mode_row("lossless").rule)
    with registered_mode(on_the_cascade):
        assert _decide("lossy-cascade") == _decide("lossless")  # control: the path, not the name, decides
    assert _decide("lossless") != _decide("lossy")  # the two paths do commit differently here


def test_what_a_mode_reads_and_whether_it_adapts_come_from_its_row():
    quiet = replace(mode_row("lossy"), name="lossy-fixed-only", adaptive=False, reads=("alpha1",))
    with registered_mode(quiet) as mode:
        assert not TierSettings(mode=mode).adapts and mode_label(TierSettings(mode=mode)) == "lossy-fixed-only"
        reads = mode_reads()
        assert mode in reads["alpha1"][0] and mode not in reads["alpha2"][0] and mode not in reads["adaptive"][0]
        assert TierSettings(mode=mode).escalation_tolerance == 0.0  # it does not read escalation_rule
        with pytest.raises(ConfigError, match="only lossless-fixed, lossy-fixed exist"):
            label_settings("lossy-fixed-only-fixed")
    assert TierSettings(mode="lossy").escalation_tolerance == TierSettings().alpha2  # control: lossy reads it


def test_an_unknown_mode_is_refused_by_name_wherever_it_is_asked():
    for ask in (lambda: mode_row("turbo"), lambda: rule_for("turbo"), lambda: TierSettings(mode="turbo"),
                lambda: Mode.parse("turbo")):
        with pytest.raises(ConfigError, match="unknown mode 'turbo'; choose one of: none, lenient, lossless, lossy, audit"):
            ask()
