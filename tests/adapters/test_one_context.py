"""Every adapter takes ``(target, context=None, **framework_options)``: the run's configuration
comes through :func:`viasd_adapt.context`, the framework's own knobs beside it.

* the run's ``mask``, ``settings``, ``plugins``, ``plugin_manager`` or ``tuned`` beside a context
  are refused by name, in every adapter (control: with only the context it runs);
* without a context they are 0.2's way: they still run, token for token as the context form does,
  with a ``DeprecationWarning`` naming ``viasd_adapt.context`` and 0.4.0 at the caller's line;
* a context built for another model is refused;
* the package, the examples and the benchmarks use no loose form (a scan, with a control).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Callable

import pytest
import torch

import viasd_adapt
from tests.support import REPO_ROOT
from tests.support.pairs import truncated_pair
from viasd_adapt.adapters import eagle, hf, pearl
from viasd_adapt.adapters.pearl import pearl_generate
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.engine.context import RUN_OPTIONS
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.pair import LoadedPair, MaskInfo

LOSSLESS = TierSettings(mode="lossless", gamma=3, adaptive=False)
#: the token-identity tests run lossy: its tokens depend on the mask and settings (lossless gives the target's own)
LOSSY = TierSettings(mode="lossy", gamma=3, adaptive=False)
PROMPT = [5, 17, 2, 40, 9]
NEW_TOKENS = 10


@pytest.fixture(scope="module")
def tiny():
    pair = truncated_pair("llama", layers=4, sharpness=8.0)
    for model in (pair.target, pair.drafter):
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
    return pair


def _loose_value(name: str, tiny):
    """A value of each loose run option, as 0.3 took it."""
    return {"mask": tiny.mask, "settings": LOSSLESS, "plugins": (), "plugin_manager": None, "tuned": None}[name]


def _hf_tokens(tiny, open_scope: Callable, settings: TierSettings = LOSSLESS) -> list[int]:
    ids = torch.tensor([PROMPT])
    with open_scope() as session:
        with torch.no_grad():
            out = tiny.target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), assistant_model=tiny.drafter,
                                       max_new_tokens=NEW_TOKENS, do_sample=False)
    assert not session.fallbacks and session.settings == settings
    return out[0, len(PROMPT):].tolist()


def _pearl_tokens(tiny, **arguments) -> list[int]:
    return pearl_generate(tiny.target, tiny.drafter, PROMPT, NEW_TOKENS, parallel=False, seed=0, **arguments).tokens


def _pair(tiny) -> LoadedPair:
    return LoadedPair(tiny.target, tiny.drafter, None, MaskInfo(tiny.mask, "test mask", False), torch.device("cpu"))


# ----------------------------------------------------------------------------- refused beside a context

#: adapter -> how to call it with a context and extra keywords (on the tiny pair)
CALLS: dict[str, Callable] = {
    "hf.patch": lambda tiny, context, **kw: hf.unpatch(hf.patch(tiny.target, context=context, **kw)),
    "hf.tiered": lambda tiny, context, **kw: _hf_tokens(tiny, lambda: hf.tiered(tiny.target, context=context, **kw)),
    "pearl_generate": lambda tiny, context, **kw: _pearl_tokens(tiny, context=context, **kw),
    "pearl.generate": lambda tiny, context, **kw: pearl.generate(_pair(tiny), PROMPT, NEW_TOKENS, context=context,
                                                                 parallel=False, seed=0, **kw),
}


@pytest.mark.parametrize("adapter", sorted(CALLS))
@pytest.mark.parametrize("name", RUN_OPTIONS)
def test_a_run_option_beside_a_context_is_refused_by_name(tiny, adapter, name):
    context = viasd_adapt.context(tiny.target, mask=tiny.mask, settings=LOSSLESS)
    with pytest.raises(ConfigError, match=rf"{adapter}: pass {name} through viasd_adapt\.context\(\.\.\.\), "
                                          r"not beside context="):
        CALLS[adapter](tiny, context, **{name: _loose_value(name, tiny)})
    assert not hf.is_patched(tiny.target)


@pytest.mark.parametrize("adapter", sorted(CALLS))
def test_with_only_the_context_each_adapter_runs(tiny, adapter):
    """Control of the refusal above: the same call without the loose option."""
    CALLS[adapter](tiny, viasd_adapt.context(tiny.target, mask=tiny.mask, settings=LOSSLESS))


def test_several_run_options_beside_a_context_are_all_named(tiny):
    context = viasd_adapt.context(tiny.target, mask=tiny.mask, settings=LOSSLESS)
    with pytest.raises(ConfigError, match=r"pass mask, settings, plugins through viasd_adapt\.context"):
        hf.patch(tiny.target, context=context, plugins=(), settings=LOSSLESS, mask=tiny.mask)


@pytest.mark.parametrize("name", ["mask", "settings", "plugins"])
def test_eagles_adapters_refuse_a_run_option_beside_a_context(ea_model, name):
    from tests.support.eagle import MASK, prompts

    context = viasd_adapt.context(ea_model, mask=MASK, settings=LOSSLESS)
    loose = {"mask": MASK, "settings": LOSSLESS, "plugins": ()}[name]
    with pytest.raises(ConfigError, match=rf"eagle\.tiered: pass {name} through viasd_adapt\.context"):
        with eagle.tiered(ea_model, context=context, **{name: loose}):
            pass
    with pytest.raises(ConfigError, match=rf"eagle\.generate: pass {name} through viasd_adapt\.context"):
        eagle.generate(ea_model, prompts(ea_model, 1)[0], 4, context=context, **{name: loose})
    assert not eagle.is_patched()
    assert len(eagle.generate(ea_model, prompts(ea_model, 1)[0], 4, context=context).tokens) == 4  # control


def test_an_option_the_adapter_never_took_is_an_unexpected_keyword(tiny):
    with pytest.raises(TypeError, match="unexpected keyword argument 'plugin_manager'"):
        hf.patch(tiny.target, plugin_manager=None)  # hf took mask, settings, plugins and tuned only
    with pytest.raises(TypeError, match="unexpected keyword argument 'masks'"):
        hf.patch(tiny.target, masks=tiny.mask)


def test_a_context_for_another_model_is_refused(tiny):
    other = truncated_pair("llama", layers=4, sharpness=8.0, seed=1)
    context = viasd_adapt.context(other.target, mask=other.mask, settings=LOSSLESS)
    with pytest.raises(ConfigError, match="built for another model"):
        hf.patch(tiny.target, context=context)
    with pytest.raises(ConfigError, match="built for another model"):
        _pearl_tokens(tiny, context=context)
    with pytest.raises(ConfigError, match=r"context= takes a RunContext .* got dict"):
        hf.patch(tiny.target, {"mode": "lossy"})


# ----------------------------------------------------------------------------- 0.2's way, deprecated


def _one_deprecation_here(record, adapter: str) -> None:
    deprecations = [w for w in record if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in deprecations]
    message = str(deprecations[0].message)
    assert f"{adapter}(..., mask=..., settings=...) without a context is deprecated" in message, message
    assert "viasd_adapt.context(target, mask=..., settings=...)" in message and "0.4.0" in message
    assert deprecations[0].filename == __file__  # the user's line


def test_hf_loose_options_warn_and_give_the_context_forms_tokens(tiny):
    new = _hf_tokens(tiny, lambda: hf.tiered(tiny.target, context=viasd_adapt.context(tiny.target, mask=tiny.mask,
                                                                                        settings=LOSSY)), LOSSY)
    with pytest.warns(DeprecationWarning) as record:
        old = _hf_tokens(tiny, lambda: hf.tiered(tiny.target, mask=tiny.mask, settings=LOSSY), LOSSY)
    _one_deprecation_here(record, "hf.tiered")
    with pytest.warns(DeprecationWarning) as record:
        session = hf.patch(tiny.target, mask=tiny.mask, settings=LOSSY)
    hf.unpatch(session)
    _one_deprecation_here(record, "hf.patch")
    assert old == new and len(new) == NEW_TOKENS and session.settings == LOSSY
    # control: the comparison can tell runs apart (lossless, the target's own tokens, differs here)
    assert _hf_tokens(tiny, lambda: hf.tiered(tiny.target, context=viasd_adapt.context(
        tiny.target, mask=tiny.mask, settings=LOSSLESS))) != new


def test_hf_positional_mask_of_0_3_warns_and_runs(tiny):
    with pytest.warns(DeprecationWarning, match=r"hf\.patch\(\.\.\., mask=\.\.\.\) without a context"):
        session = hf.patch(tiny.target, tiny.mask)
    hf.unpatch(session)
    assert session.context.routing == tiny.mask


def test_pearl_loose_options_warn_and_give_the_context_forms_tokens(tiny):
    new = _pearl_tokens(tiny, context=viasd_adapt.context(tiny.target, mask=tiny.mask, settings=LOSSY))
    with pytest.warns(DeprecationWarning) as record:
        old = _pearl_tokens(tiny, mask=tiny.mask, settings=LOSSY)
    _one_deprecation_here(record, "pearl_generate")
    assert old == new and len(new) == NEW_TOKENS
    with pytest.warns(DeprecationWarning) as record:
        by_pair = pearl.generate(_pair(tiny), PROMPT, NEW_TOKENS, mask=tiny.mask, settings=LOSSY, parallel=False, seed=0)
    _one_deprecation_here(record, "pearl.generate")
    assert by_pair.tokens == new
    with pytest.warns(DeprecationWarning, match=r"pearl_generate\(\.\.\., mask=\.\.\., settings=\.\.\.\)"):
        positional = pearl_generate(tiny.target, tiny.drafter, PROMPT, NEW_TOKENS, LOSSY, mask=tiny.mask,  # 0.2's order
                                    parallel=False, seed=0)
    assert positional.tokens == new
    # control: the comparison can tell runs apart (other thresholds commit other tokens here)
    other = _pearl_tokens(tiny, context=viasd_adapt.context(tiny.target, mask=tiny.mask,
                                                            settings=LOSSY.with_(alpha1=0.05, alpha2=0.02)))
    assert other != new


def test_eagle_loose_options_warn_and_give_the_context_forms_tokens(ea_model):
    from tests.support.eagle import MASK, prompts
    from viasd_adapt.core.monitor import ViasdQualityWarning

    ids = prompts(ea_model, 1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ViasdQualityWarning)  # the tiny head looks unrelated to the monitor: not tested here
        new = eagle.generate(ea_model, ids, 12, context=viasd_adapt.context(ea_model, mask=MASK, settings=LOSSY)).tokens
        with pytest.warns(DeprecationWarning) as record:
            old = eagle.generate(ea_model, ids, 12, mask=MASK, settings=LOSSY).tokens
        lossless = eagle.generate(ea_model, ids, 12,
                                  context=viasd_adapt.context(ea_model, mask=MASK, settings=LOSSLESS))
    _one_deprecation_here(record, "eagle.generate")
    assert old == new and len(new) == 12
    assert lossless.tokens != new  # control: the comparison can tell runs apart
    with pytest.warns(DeprecationWarning) as record:
        with eagle.tiered(ea_model, mask=MASK, settings=LOSSY) as session:
            pass
    _one_deprecation_here(record, "eagle.tiered")
    assert session.settings == LOSSY and session.context.target is ea_model.base_model


def test_the_context_forms_do_not_warn(tiny, recwarn):
    """Control of the warnings above: the context form is silent."""
    context = viasd_adapt.context(tiny.target, mask=tiny.mask, settings=LOSSLESS)
    _hf_tokens(tiny, lambda: hf.tiered(tiny.target, context=context))
    _pearl_tokens(tiny, context=context)
    assert [str(w.message) for w in recwarn if issubclass(w.category, DeprecationWarning)] == []


# ----------------------------------------------------------------------------- nobody uses the loose form

ADAPTER_CALLS = {("hf", "tiered"), ("hf", "patch"), ("eagle", "tiered"), ("eagle", "generate"), ("pearl", "generate"),
                 (None, "pearl_generate")}


def loose_calls(path: Path) -> list[str]:
    """``path:line`` of each adapter call in ``path`` that passes a run option loosely."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        key = ((func.value.id if isinstance(func.value, ast.Name) else "?", func.attr) if isinstance(func, ast.Attribute)
               else (None, func.id) if isinstance(func, ast.Name) else None)
        if key in ADAPTER_CALLS and any(k.arg in RUN_OPTIONS for k in node.keywords):
            found.append(f"{path}:{node.lineno}")
    return found


def test_the_package_examples_and_benchmarks_pass_no_run_option_loosely(tmp_path):
    roots = [REPO_ROOT / name for name in ("viasd_adapt", "adapters", "examples", "benchmarks")]
    found = [hit for root in roots for path in sorted(root.rglob("*.py")) if not path.is_symlink()
             for hit in loose_calls(path)]
    assert found == []
    # control: the scan finds each adapter's loose call
    snippet = tmp_path / "old.py"
    snippet.write_text("hf.tiered(t, mask=m)\neagle.generate(e, ids, 4, settings=s)\npearl_generate(t, d, ids, 4, plugins=p)\n"
                       "hf.tiered(t, context=viasd_adapt.context(t, mask=m))\n")
    assert loose_calls(snippet) == [f"{snippet}:1", f"{snippet}:2", f"{snippet}:3"]


def test_each_adapter_shows_its_own_parameters():
    """``hf.tiered`` no longer hides its parameters behind ``*args, **kwargs``: the context, then the
    framework's own options by name (only 0.2's run options remain behind ``**run_options``)."""
    import inspect

    def named(function) -> list[str]:
        return [p.name for p in inspect.signature(function).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    assert named(hf.tiered) == named(hf.patch) == ["target", "context", "tokenizer", "assistant_tokenizer", "share_prefix"]
    assert named(eagle.tiered) == ["ea_model", "context", "options"]
    assert named(pearl_generate)[:5] == ["target", "drafter", "prompt_ids", "max_new_tokens", "context"]
    assert not any(name in RUN_OPTIONS for function in (hf.tiered, hf.patch, eagle.tiered, eagle.generate, pearl_generate)
                   for name in named(function))
    # control: a signature that hides its parameters shows none of them
    assert named(lambda target, *args, **kwargs: None) == ["target"]
