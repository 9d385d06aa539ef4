"""What an engine asks the vLLM plugin for, read and checked before any vLLM code runs.

An engine opts in through vLLM's per-engine ``additional_config`` (``LLM(...,
additional_config={"viasd": {...}})``): that is what scopes the plugin to the engine that asked for
it. vLLM loads every ``vllm.general_plugins`` entry point in every engine process on the machine,
so an engine whose config has no ``"viasd"`` key must get stock vLLM, byte for byte.

Keys of the ``"viasd"`` dict:

* ``tuned`` (required): path of a ``tuned.json`` written by ``viasd tune``, read by the same class as
  ``viasd generate`` reads it (:class:`~viasd_adapt.config.tuned.TunedSettings`: the same version
  check, the same defaults, the same check of ``measured_on``). Its ``choice`` decides the rule:
  ``lenient`` serves the lenient rule at the tuned tolerance (a file that states none: the
  TierSettings default, as ``viasd generate`` runs it; :mod:`viasd_adapt.config.tuned` says why);
  ``none`` (untiered SD won) serves stock vLLM; a tiered choice (``lossy``, ``lossless``, ...) is refused, because the
  slim tier has no place in vLLM's acceptance step (``docs/serving.md`` says why and what it would take).
* ``lenience`` (optional): overrides the tuned tolerance, e.g. 0 to check token identity with
  stock vLLM. Must be in [0, 1).
* ``audit`` (optional): a path the plugin keeps rewriting with its audit counters (committed
  tokens, how many of them the target's argmax would have overruled, and their regret): the
  fidelity the server actually delivered, to hold against what the tuner measured.

The model check: the tuned file's fingerprint (architecture, layer count, hidden and vocabulary
sizes, and a sketch of the weights) is compared with the engine's model config and, for a local
safetensors folder, with the stored weights. A file tuned on another model is refused with both
models named, not silently applied.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from viasd_adapt.config.tuned import DRAFTER_MODEL, EAGLE_HEAD, PROMPT_LOOKUP_DRAFTER, TunedSettings, drafter_mismatch
from viasd_adapt.errors import ConfigError, ModelMismatchError

CONFIG_KEY = "viasd"
KNOWN_KEYS = ("tuned", "lenience", "audit")
SERVABLE_CHOICES = ("lenient", "none")
SIZE_KEYS = ("architecture", "num_layers", "hidden_size", "vocab_size")  # routing.mask._SIZE_KEYS


@dataclass(frozen=True)
class ServingRule:
    """The acceptance rule one engine serves: the lenient tolerance (0 = stock vLLM) and where it came from."""

    lenience: float
    tuned_path: str
    choice: str
    fingerprint: dict
    measured: dict
    audit_path: str | None = None
    #: the drafter the tuned lenience was measured with (``tuned.json``'s ``drafter``: a fingerprint or
    #: "prompt-lookup"; None in older files) and on which framework; checked by :func:`check_drafter`
    drafter: Any = None
    measured_on: str = "engine"
    #: the lenience was given in the request ('lenience'), not taken from the tuned file
    lenience_given: bool = False

    @property
    def is_stock(self) -> bool:
        return self.lenience == 0.0

    def describe(self) -> str:
        fid = self.measured or {}
        tuned = (f"tuned: overrule {fid['overrule']:.3f}, regret {fid['regret']:.3f} nats/token"
                 if isinstance(fid.get("overrule"), (int, float)) and isinstance(fid.get("regret"), (int, float))
                 else "no fidelity recorded")
        return f"viasd lenient rule a={self.lenience:g} from {self.tuned_path} ({self.choice}; {tuned})"


def _check_lenience(value: Any, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not 0.0 <= value < 1.0:
        raise ConfigError(f"{source}: lenience must be a number in [0, 1) (the target accepts a draft whose probability "
                          f"is at least 1 - lenience of its own top choice), got {value!r}")
    return float(value)


def read_tuned(path: str | os.PathLike) -> TunedSettings:
    """The tuned settings at ``path``, read as every command reads them (:meth:`TunedSettings.load`)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ConfigError(f"tuned settings file {path} does not exist (write one with `viasd tune`)")
    return TunedSettings.load(path)


def parse_request(additional_config: Mapping[str, Any] | None) -> ServingRule | None:
    """The rule an engine asked for, or None when it did not ask (stock vLLM)."""
    if not additional_config or CONFIG_KEY not in additional_config:
        return None
    request = additional_config[CONFIG_KEY]
    if not isinstance(request, Mapping):
        raise ConfigError(f"additional_config[{CONFIG_KEY!r}] must be a dict such as {{'tuned': 'path/to/tuned.json'}}, "
                          f"got {type(request).__name__}")
    unknown = sorted(set(request) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigError(f"additional_config[{CONFIG_KEY!r}]: unknown key(s) {', '.join(map(repr, unknown))}; "
                          f"known: {', '.join(KNOWN_KEYS)}")
    if not request.get("tuned"):
        raise ConfigError(f"additional_config[{CONFIG_KEY!r}] needs 'tuned': the path of a tuned.json from `viasd tune`")
    path = str(Path(str(request["tuned"])).expanduser())
    tuned = read_tuned(path)
    choice = tuned.choice
    if tuned.runs_target_alone:
        raise ConfigError(f"{path} recommends the target alone (choice 'ar'): {tuned.target_alone_reason()}; serve "
                          "it without speculative decoding, or tune again with another drafter")
    if choice not in SERVABLE_CHOICES:
        raise ConfigError(
            f"{path} recommends {choice!r} (mode {tuned.settings.mode.value!r}); the vLLM plugin serves only the lenient "
            f"rule and plain SD. The slim tier needs a layer-skipped pass inside vLLM's model runner, which no extension "
            f"point offers: see docs/serving.md")
    lenience = _check_lenience(tuned.settings.lenience, path) if choice == "lenient" else 0.0
    if "lenience" in request:
        lenience = _check_lenience(request["lenience"], f"additional_config[{CONFIG_KEY!r}]['lenience']")
    audit = request.get("audit")
    if audit is not None and not isinstance(audit, (str, os.PathLike)):
        raise ConfigError(f"additional_config[{CONFIG_KEY!r}]['audit'] must be a file path, got {audit!r}")
    drafter = tuned.drafter.as_dict() if hasattr(tuned.drafter, "as_dict") else tuned.drafter
    return ServingRule(lenience, path, choice, tuned.fingerprint.as_dict(), dict(tuned.measured),
                       str(audit) if audit is not None else None, drafter, tuned.measured_on, "lenience" in request)


# --------------------------------------------------------------------------- the drafter check


def _engine_drafter(speculative_config: Any) -> tuple[str, dict | None]:
    """What a vLLM engine drafts with, as :func:`~viasd_adapt.config.tuned.drafter_mismatch` names it:
    prompt lookup for n-gram drafting, a drafter model (with its config's sizes, when the config is
    at hand), an EAGLE head, or another head by its method's name."""
    method = getattr(speculative_config, "method", None)
    if method == "ngram":
        return PROMPT_LOOKUP_DRAFTER, None
    if method in (None, "draft_model"):
        draft_config = getattr(getattr(speculative_config, "draft_model_config", None), "hf_config", None)
        return DRAFTER_MODEL, config_fingerprint(draft_config) if draft_config is not None else None
    if str(method).startswith("eagle"):
        return EAGLE_HEAD, None
    return f"a {method} head", None


def check_drafter(rule: ServingRule, speculative_config: Any) -> None:
    """Refuses a tuned lenience measured with another drafter than the engine's, as ``viasd generate``
    does not apply such settings (:func:`~viasd_adapt.config.tuned.drafter_mismatch`, the same rule):
    the tolerance that keeps the regret within budget depends on the drafter. Not checked: a file
    that records no drafter (written before the record existed), a lenience given in the request,
    and plain SD (lenience 0: nothing tuned is served). A drafter model is compared by its sizes
    (vLLM holds no HF model object to fingerprint)."""
    if rule.lenience_given or rule.is_stock:
        return
    drafter, sizes = _engine_drafter(speculative_config)
    recorded = rule.drafter if isinstance(rule.drafter, dict) else {}

    def model_problems() -> list[str]:
        return [f"{key}: {recorded.get(key)!r} recorded, {sizes.get(key)!r} here"
                for key in SIZE_KEYS if sizes is not None and recorded.get(key) != sizes.get(key)]

    mismatch = drafter_mismatch(rule.drafter, rule.measured_on, drafter, model_problems)
    if mismatch is not None:
        raise ConfigError(f"{rule.tuned_path} was {mismatch}: its lenience ({rule.lenience:g}) was tuned for that "
                          f"drafter. Run `viasd tune` with this engine's drafter, or set "
                          f"additional_config[{CONFIG_KEY!r}]['lenience'] to serve a tolerance you chose.")


# --------------------------------------------------------------------------- the model check


def config_fingerprint(hf_config: Any) -> dict:
    """The size part of :func:`viasd_adapt.routing.mask.model_fingerprint`, read from an HF config
    (what a vLLM engine has before and without an HF model object)."""
    text = getattr(hf_config, "text_config", None) or hf_config
    return {
        "architecture": (getattr(hf_config, "architectures", None) or [None])[0],
        "model_type": getattr(hf_config, "model_type", None),
        "num_layers": getattr(text, "num_hidden_layers", getattr(text, "n_layer", None)),
        "hidden_size": getattr(text, "hidden_size", getattr(text, "n_embd", None)),
        "vocab_size": getattr(text, "vocab_size", None),
    }


def _summary(fp: Mapping[str, Any]) -> str:
    return (f"{fp.get('architecture')} ({fp.get('model_type')}, {fp.get('num_layers')} layers, hidden "
            f"{fp.get('hidden_size')}, vocab {fp.get('vocab_size')})")


_EMBEDDING_SUFFIXES = ("embed_tokens.weight", "wte.weight", "embed_in.weight", "word_embeddings.weight")


def folder_weights_sketch(folder: str | os.PathLike, expected_sketch: Mapping[str, Any], num_layers: int) -> dict | None:
    """The ``weights_sketch`` of the safetensors in ``folder``, for the tensors ``expected_sketch``
    names (input embeddings, first and last layer's recorded parameter); None when the folder has
    no safetensors (a hub id, a GGUF file): then only the sizes are compared."""
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    import torch  # noqa: F401  (safetensors' torch loader)
    from safetensors import safe_open

    from viasd_adapt.routing.mask import SKETCH_ATOL, SKETCH_RTOL, SKETCH_SCHEME, _sketch

    wanted: dict[str, tuple] = {}
    for component, recorded in (expected_sketch.get("tensors") or {}).items():
        param = recorded.get("parameter", "") if isinstance(recorded, dict) else ""
        if component == "embeddings":
            wanted[component] = tuple(_EMBEDDING_SUFFIXES)
        elif component in ("first_layer", "last_layer"):
            index = 0 if component == "first_layer" else num_layers - 1
            wanted[component] = (f"layers.{index}.{param}", f"h.{index}.{param}")
    tensors: dict[str, dict] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                for component, suffixes in wanted.items():
                    if component not in tensors and any(key == s or key.endswith("." + s) for s in suffixes):
                        tensor = handle.get_tensor(key)
                        param = expected_sketch["tensors"][component].get("parameter")
                        tensors[component] = {"parameter": param, "shape": list(tensor.shape), "values": _sketch(tensor)}
    return {"scheme": SKETCH_SCHEME, "rtol": SKETCH_RTOL, "atol": SKETCH_ATOL, "tensors": tensors}


def check_model(rule: ServingRule, hf_config: Any, model_name: str) -> None:
    """Refuses ``rule`` unless its tuned.json was tuned on the model this engine serves
    (:class:`ModelMismatchError` naming both)."""
    from viasd_adapt.routing.mask import fingerprint_mismatches

    expected = rule.fingerprint
    if not expected:
        raise ModelMismatchError(f"{rule.tuned_path} records no model fingerprint, so it cannot be checked against "
                                 f"{model_name}; re-run `viasd tune` for this model")
    actual = config_fingerprint(hf_config)
    problems = [f"{key}: tuned on {expected.get(key)!r}, this model has {actual.get(key)!r}"
                for key in SIZE_KEYS if expected.get(key) != actual.get(key)]
    sketch = expected.get("weights_sketch")
    if not problems and isinstance(sketch, dict):
        # same sizes: the weights decide (a retrained or fine-tuned model of the same shape is another model).
        # No safetensors to read (a hub id, a GGUF file): the sizes are all that can be compared.
        folder_sketch = folder_weights_sketch(model_name, sketch, int(actual["num_layers"]))
        if folder_sketch is not None:
            problems = fingerprint_mismatches(expected, {**actual, "weights_sketch": folder_sketch})
    if problems:
        raise ModelMismatchError(
            f"{rule.tuned_path} was tuned on another model: it records {_summary(expected)}, this engine serves "
            f"{model_name!r}, {_summary(actual)}. " + "; ".join(problems[:3])
            + ". Run `viasd tune` on this model (or drop additional_config['viasd'] for stock vLLM).")


__all__ = ["CONFIG_KEY", "KNOWN_KEYS", "ServingRule", "check_drafter", "check_model", "config_fingerprint", "folder_weights_sketch",
           "parse_request", "read_tuned"]
