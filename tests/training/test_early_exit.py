"""Early-exit training (the demo-ee preset): the exit losses are added, and the model is left as it was."""

from __future__ import annotations

import torch

from viasd_adapt.training.layer_skip import skipped_layers
from viasd_adapt.training.presets import DEMO_EE, get_preset
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.training.train import causal_lm_loss


def test_early_exit_loss_adds_the_exits_and_restores_the_layers():
    torch.manual_seed(0)
    model = tiny_model("llama", 0, num_layers=6)
    batch = torch.randint(0, 96, (2, 12))
    layers_before = list(model.model.layers)
    plain = causal_lm_loss(model, batch)
    combined = causal_lm_loss(model, batch, early_exit_layers=(2, 4), early_exit_weight=0.5)
    assert list(model.model.layers) == layers_before
    head, norm = model.get_output_embeddings(), model.model.norm
    exits = []
    for k in (2, 4):
        with skipped_layers(model, range(k, 6)):  # the stream entering layer k = the first k layers alone
            hidden = model.model(input_ids=batch).last_hidden_state
        exits.append(torch.nn.functional.cross_entropy(model.lm_head(hidden)[:, :-1].reshape(-1, 96), batch[:, 1:].reshape(-1)))
    expected = plain.item() + 0.5 * (exits[0].item() + exits[1].item()) / 2
    assert abs(combined.item() - expected) < 1e-4 and combined.item() > plain.item()
    combined.backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None
    with skipped_layers(model, [3]):  # LayerDrop stubs and exit recorders compose
        assert torch.isfinite(causal_lm_loss(model, batch, (3,), 0.5))
    assert list(model.model.layers) == layers_before and head is model.get_output_embeddings() and norm is model.model.norm


def test_demo_ee_preset_is_the_demo_recipe_with_exit_losses():
    preset = get_preset("demo-ee")
    assert preset is DEMO_EE and preset.target == get_preset("demo").target
    assert preset.target_training.early_exit_layers == (6, 8, 10) and preset.target_training.early_exit_weight == 0.5
    assert preset.draft_training == get_preset("demo").draft_training
