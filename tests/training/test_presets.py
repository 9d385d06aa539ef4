"""Presets: the demo pair's shape meets the project's requirements and fits the size budget."""

from __future__ import annotations

import dataclasses

import pytest

from viasd_adapt.errors import ConfigError
from viasd_adapt.training.presets import DEMO, TINY, ModelShape, get_preset


def _fp16_bytes(shape: ModelShape, vocab: int) -> int:
    per_layer = 4 * shape.hidden_size**2 + 3 * shape.hidden_size * shape.intermediate_size + 2 * shape.hidden_size
    return 2 * (vocab * shape.hidden_size + shape.num_layers * per_layer + shape.hidden_size)


@pytest.mark.parametrize("preset", [TINY, DEMO])
def test_target_is_deep_and_drafter_shallow(preset):
    assert preset.target.num_layers >= 12
    assert preset.draft.num_layers in (1, 2)


def test_demo_fits_the_package_budget():
    assert _fp16_bytes(DEMO.target, DEMO.vocab_size) + _fp16_bytes(DEMO.draft, DEMO.vocab_size) < 15 * 2**20


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ConfigError, match="demo"):
        get_preset("huge")


def test_embedding_transfer_needs_equal_widths():
    with pytest.raises(ConfigError, match="hidden sizes"):
        dataclasses.replace(TINY, draft=ModelShape(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))


def test_the_registry_names_every_recipe():
    """The registry names the recipes in its error messages without importing this room; a preset
    added or renamed here must be named there too."""
    from viasd_adapt.models.registry import RECIPES
    from viasd_adapt.training.presets import PRESETS

    assert sorted(RECIPES) == sorted(PRESETS)
