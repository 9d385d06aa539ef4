"""Drivers for the conformance suite, built once per session and shared by its modules.

Three kinds of pair, each the one a concern needs (tests/support/pairs.py explains the builders):

* ``greedy_driver(framework, family)``: a :func:`truncated_pair` of that family (an encoder-decoder
  :func:`seq2seq_pair` for ``seq2seq``; the tiny EaModel for ``eagle``), for greedy identity;
* ``modes_driver(framework)``: the pair lossy mode is built for (a noisy-copy drafter and a damped
  layer that the mask skips; a damped BART for ``seq2seq``; the tiny EaModel), for the mode
  invariants, errors and scopes;
* ``sampling_driver(framework)``: a 12-token vocabulary, so that the joint of two tokens has few
  enough cells for a chi-square test.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.frameworks import EagleDriver, EngineDriver, HFDriver, PearlDriver
from tests.support.pairs import TinyPair, noisy_pair, truncated_pair


DECODER_ONLY = {"engine": EngineDriver, "hf": HFDriver, "pearl": PearlDriver}
GREEDY_PROMPTS = [[3], [7], [5, 17, 2, 40, 9]]
MODES_PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [10, 20, 30, 40, 50, 60]]


class Drivers:
    """Builds each driver on first use and keeps it for the session."""

    def __init__(self):
        self.built: dict = {}

    def _get(self, key, build):
        if key not in self.built:
            self.built[key] = build()
        return self.built[key]

    # -- EAGLE and encoder-decoder pieces

    def _eagle(self, request, name: str = "eagle") -> EagleDriver:
        """Needs the test's ``request``: the session fixtures ``ea_model`` and ``tiny_eagle`` (which
        skip when eagle-llm is not installed) are asked for only by tests that run EAGLE."""
        from transformers import AutoModelForCausalLM

        from tests.support.eagle import MASK, prompts

        ea_model = request.getfixturevalue("ea_model")
        tiny_eagle = request.getfixturevalue("tiny_eagle")

        def build():
            stock = AutoModelForCausalLM.from_pretrained(tiny_eagle / "target", dtype=torch.float32).eval()
            ids = [p[0].tolist() for p in prompts(ea_model, 3)]
            pair = TinyPair(ea_model.base_model, ea_model.ea_layer, MASK)
            return EagleDriver(pair, [ids[0][:3]] + ids, name=name, ea_model=ea_model, stock_target=stock,
                               vocab_size=ea_model.base_model.config.vocab_size)

        return self._get(("eagle", name), build)

    @staticmethod
    def _seq2seq(pair: TinyPair, family: str) -> HFDriver:
        """Sources, and for text models a decoder prefix after the start token (varied decoder states)."""
        from tests.support.seq2seq import VOCAB, source_for

        prompts = []
        for seed, prefix in enumerate((0, 2, 4)):
            kwargs = source_for(family, seed)
            if prefix and family != "whisper":  # Whisper's generate builds its own decoder prompt
                start = pair.target.generation_config.decoder_start_token_id
                body = torch.randint(3, VOCAB - 3, (1, prefix), generator=torch.Generator().manual_seed(seed + 100))
                kwargs["decoder_input_ids"] = torch.cat([torch.tensor([[start]]), body], dim=1)
            prompts.append(kwargs)
        return HFDriver(pair, prompts, name="seq2seq", vocab_size=pair.target.config.vocab_size)

    # -- the three kinds

    def greedy(self, request, framework: str, family: str = "llama"):
        if framework == "eagle":
            return self._eagle(request)

        def build():
            if framework == "seq2seq":  # "bart" or "bart+unit-gain" (a source-sensitive target)
                from tests.support.seq2seq import seq2seq_pair

                name, _, unit_gain = family.partition("+")
                return self._seq2seq(seq2seq_pair(name, unit_gain=bool(unit_gain)), name)
            pair = truncated_pair(family)
            return DECODER_ONLY[framework](pair, GREEDY_PROMPTS, name=framework, vocab_size=96)

        return self._get(("greedy", framework, family), build)

    def modes(self, request, framework: str):
        if framework == "eagle":
            return self._eagle(request)

        def build():
            if framework == "seq2seq":
                from tests.support.seq2seq import damped_seq2seq_pair

                return self._seq2seq(damped_seq2seq_pair("bart"), "bart")
            return DECODER_ONLY[framework](noisy_pair("llama"), MODES_PROMPTS, name=framework, vocab_size=64)

        return self._get(("modes", framework), build)

    def sampling(self, request, framework: str):
        if framework == "eagle":
            return self._eagle(request)

        def build():
            if framework == "seq2seq":
                from tests.support.seq2seq import seq2seq_pair

                source = {"input_ids": torch.tensor([[3, 7, 1, 5, 2]])}
                return HFDriver(seq2seq_pair("mbart", vocab_size=12, sharpness=40.0), [source], name="seq2seq",
                                vocab_size=12)
            pair = truncated_pair("llama", vocab_size=12, layers=4, sharpness=12.0)
            return DECODER_ONLY[framework](pair, [[3, 7, 1]], name=framework, vocab_size=12)

        return self._get(("sampling", framework), build)


@pytest.fixture(scope="session")
def drivers() -> Drivers:
    return Drivers()
