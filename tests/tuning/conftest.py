"""A char pair on disk with a hand-written tuned.json beside its mask (lenient chosen, with best
lenient and VIA-SD points), so the resolver's layers can each be seen."""

from __future__ import annotations

import shutil

import pytest

from tests.support.pairs import save_char_pair
from viasd_adapt.routing.mask import MaskArtifact
from viasd_adapt.settings import TierSettings
from viasd_adapt.tuned import TunedSettings

LENIENT = TierSettings(mode="lenient", lenience=0.4)
BEST_LENIENT = TierSettings(mode="lenient", lenience=0.2)
BEST_VIASD = TierSettings(mode="lossy", alpha1=0.1, alpha2=0.05, greedy_gates="top", ratio=0.5)


def write_tuned(pair, measured_on: str | None = None) -> TunedSettings:
    fingerprint = MaskArtifact.load(pair / "mask.json").fingerprint
    report = {"best_within_budget": {"lenient": {"settings": BEST_LENIENT.to_dict(), "ll_drop": 0.01},
                                     "viasd": {"settings": BEST_VIASD.to_dict(), "mask": "mask.json", "ll_drop": 0.015},
                                     "sd": None, "lossless": None},
              "mask_file": None}
    extra = {} if measured_on is None else {"measured_on": measured_on}
    tuned = TunedSettings(LENIENT, "lenient", None, fingerprint, report=report, **extra)
    tuned.save(pair / "tuned.json")
    return tuned


@pytest.fixture(scope="session")
def tuned_pair_template(tmp_path_factory):
    pair = save_char_pair(tmp_path_factory.mktemp("tuned-pair") / "pair", with_mask=True)
    write_tuned(pair)
    return pair


@pytest.fixture()
def tuned_pair(tuned_pair_template, tmp_path):
    return shutil.copytree(tuned_pair_template, tmp_path / "pair")
