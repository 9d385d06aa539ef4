"""A stock run (the framework without viasd-adapt) and a tiered run are told apart explicitly
(``RunRequest.stock``), and the bench's rows ask for each without changing the modes they print."""

from __future__ import annotations

import pytest

from viasd_adapt.bench.run import AR_ROW_MODE, PlannedRow, _request
from viasd_adapt.frameworks.requests import STOCK_MODE, RunRequest
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import Mode, TierSettings


def test_tiered_requests_take_their_mode_from_the_settings():
    request = RunRequest.tiered([1, 2], 4, TierSettings(mode="lenient"), seed=3)
    assert request.mode == "lenient" and not request.stock and request.seed == 3


def test_a_stock_request_is_untiered_and_says_so():
    request = RunRequest.stock_run([1], 4, TierSettings(mode="lossy", gamma=3))
    assert request.stock and request.mode == STOCK_MODE == "plain"
    assert request.settings.mode is Mode.NONE and request.settings.gamma == 3


@pytest.mark.parametrize("row, mode, stock, settings_mode", [
    (PlannedRow("ar", AR_ROW_MODE, "ar"), "none", False, "none"),
    (PlannedRow("hf", "plain"), "plain", True, "none"),
    (PlannedRow("hf", "none"), "none", False, "none"),
    (PlannedRow("hf", "lossy"), "lossy", False, "lossy"),
])
def test_bench_rows_ask_for_the_run_they_print(row, mode, stock, settings_mode):
    request = _request(row, TierSettings(), SamplingConfig(), [1, 2], 3, 0)
    assert (request.mode, request.stock, request.settings.mode.value) == (mode, stock, settings_mode)
    assert row.is_ar is (row.framework == "ar") and row.stock is stock
    assert row.label == ("ar" if row.is_ar else f"hf/{row.mode}")
