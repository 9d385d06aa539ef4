"""docs/architecture.md's recipe "Adding a mode", kept true: a toy mode, added from this module alone
(a row of the table of modes and a rules plugin that answers its rule), runs end to end on a real
small pair, and with either place left out it fails by name.

The toy mode, ``reject-drafts``, runs the full-only path with a rule that accepts no draft: each
cycle commits q's own token after the block's first position, so greedy decoding gives exactly the
target's greedy output with every draft rejected. Untiered SD on the same pair (mode ``none``) keeps
drafts: the control that the toy rule, not the pair, made them all go.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.pairs import CHAR_PROMPTS, greedy_reference
from viasd_adapt.core.hooks import hookimpl
from viasd_adapt.core.modes import Check, CyclePath, Mode, ModeRow, ModeRules, mode_names, registered_mode
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.engine.drafters import ModelDrafter
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.engine.verifier import TieredVerifier
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.pair import load_pair

GREEDY = SamplingConfig()
NEW_TOKENS = 12
#: The toy mode's row: q alone verifies (no mask needed), with the rule the plugin below answers.
TOY = ModeRow("reject-drafts", ModeRules(Check("toy_reject_accept_prob", "full")), CyclePath.FULL_ONLY, exact=True)


class RejectEveryDraft:
    """The toy mode's rule: q accepts no draft."""

    @hookimpl
    def toy_reject_accept_prob(self, tokens, p, q, settings, greedy):
        return torch.zeros(tokens.shape[0])


@pytest.fixture()
def pair(char_pair):
    return load_pair(char_pair / "target", char_pair / "draft", char_pair / "mask.json", device="cpu")


def _generate(pair, settings: TierSettings, plugins=()):
    prompt = pair.tokenizer(CHAR_PROMPTS[0])["input_ids"]
    context = pair.run_context(settings, plugins, advice=False)
    verifier = TieredVerifier.of(context, context.verify_step("engine"), GREEDY)
    return prompt, speculative_generate(ModelDrafter(pair.draft, GREEDY), verifier, prompt, NEW_TOKENS)


def test_a_toy_mode_added_from_a_test_runs_end_to_end(pair):
    with registered_mode(TOY) as mode:
        assert mode is Mode("reject-drafts") and "reject-drafts" in mode_names() and not mode.uses_slim
        prompt, out = _generate(pair, TierSettings(mode="reject-drafts", gamma=4), [RejectEveryDraft()])
    assert out.tokens == greedy_reference(pair.target, prompt, NEW_TOKENS)  # q's own tokens, one per cycle
    assert out.metrics.draft_tokens == 0 and out.metrics.cycles == NEW_TOKENS
    _, untiered = _generate(pair, TierSettings(mode="none", gamma=4))  # control: the pair's drafts do pass
    assert untiered.tokens == out.tokens and untiered.metrics.draft_tokens > 0
    # the registration was scoped: the mode is gone again
    with pytest.raises(ConfigError, match="unknown mode 'reject-drafts'"):
        TierSettings(mode="reject-drafts")


def test_the_toy_mode_without_its_row_is_refused_by_name():
    with pytest.raises(ConfigError, match="unknown mode 'reject-drafts'; choose one of: none, lenient"):
        TierSettings(mode="reject-drafts")


def test_the_toy_mode_without_its_rule_plugin_is_refused_by_name(pair):
    with registered_mode(TOY), pytest.raises(ConfigError, match="no rules plugin answers the rule hook "
                                                                 "'toy_reject_accept_prob' that mode reject-drafts asks"):
        _generate(pair, TierSettings(mode="reject-drafts", gamma=4))


def test_a_built_in_mode_cannot_be_replaced():
    with pytest.raises(ConfigError, match="'lossy' is already in the table"):
        with registered_mode(ModeRow("lossy", ModeRules(Check("toy_reject_accept_prob", "full")), CyclePath.FULL_ONLY)):
            pass  # pragma: no cover
    assert Mode.LOSSY.row.path is CyclePath.THREE_TIERS
