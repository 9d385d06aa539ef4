"""``viasd generate`` as a generation CLI: the answer alone on stdout (so it can be piped), tokens
written while the run is still going, in every framework, and no deprecation notice from
transformers' generation code caused by the project's calls."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest
import torch
from click.testing import CliRunner

from tests.support.gguf import write_tiny_gguf
from viasd_adapt.cli.main import cli
from viasd_adapt.config.tuned import TunedForAnotherDrafterWarning
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.models.registry import demo_pair_paths
from viasd_adapt.models.tiny import tiny_model

pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[2]
# The tiny GGUF vocabulary: letters, digits and " .,:;!?"
CHAT_PROMPT = "Hello Ada. Count to three, please!"
STREAMED = [("ar", None), ("lookup", None), ("engine", "none"), ("hf", "none"), ("pearl", "none"), ("eagle", "none")]


@pytest.fixture(scope="module")
def chat_gguf(tmp_path_factory):
    """A tiny Llama with a chat template, as a GGUF file (end of sequence: token 1, ``</s>``)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("chat") / "chat.gguf", tiny_model("llama", seed=4, vocab_size=64))


def test_piped_stdout_holds_the_answer_alone(chat_gguf, tmp_path):
    """`viasd generate --chat on --no-show-tiers ... > out.txt`: out.txt gets the answer text and
    nothing else; the chat turn and the summary go to stderr."""
    env = dict(os.environ, VIASD_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out_json, out_txt = tmp_path / "out.json", tmp_path / "out.txt"
    with out_txt.open("wb") as stdout:
        proc = subprocess.run(
            [sys.executable, "-c", "from viasd_adapt.cli.main import cli; cli()", "generate", "--target", str(chat_gguf),
             "--draft", "prompt-lookup", "--framework", "hf", "--mode", "none", "--chat", "on", "--no-show-tiers",
             "--prompt", CHAT_PROMPT, "--max-new-tokens", "16", "--json", str(out_json)],
            stdout=stdout, stderr=subprocess.PIPE, env=env, timeout=300, cwd=tmp_path)
    stderr = proc.stderr.decode()
    assert proc.returncode == 0, stderr
    data = json.loads(out_json.read_text())
    tokens, text = data["tokens"], data["text"]
    if tokens[-1] == 1:  # the end-of-sequence marker ends the answer; it is no answer text
        assert text.endswith("</s>")
        text = text[: -len("</s>")]
    assert len(text.strip()) >= 3  # the tiny model wrote something to compare
    assert out_txt.read_text(encoding="utf-8") == text + "\n"
    assert CHAT_PROMPT in stderr and "chat turn (user):" in stderr and "16 tokens" not in out_txt.read_text()
    assert f"{len(tokens)} tokens in" in stderr  # the summary line


@pytest.mark.parametrize("framework,mode", STREAMED + [("hf", "lenient")])  # hf: its stock loop observed, and the tier's loop
def test_tokens_reach_stdout_while_the_run_is_still_going(framework, mode, monkeypatch):
    """Each answer piece is recorded with the number of module forwards run when it was written: the
    first piece is written before the last forward (not all at once at the end), and the pieces put
    together are what stdout holds."""
    if framework == "eagle":
        pytest.importorskip("eagle.model.ea_model")
    from viasd_adapt.prompts.splits import demo_snippet

    forwards = [0]
    writes: list[tuple[bool, bool, str, int]] = []
    echo = click.echo

    def recording_echo(message=None, file=None, nl=True, err=False, color=None):
        writes.append((err, nl, "" if message is None else str(message), forwards[0]))
        return echo(message, file=file, nl=nl, err=err, color=color)

    def count(module, args, output):  # every module's forward: the run's work, in order
        forwards[0] += 1

    monkeypatch.setattr(click, "echo", recording_echo)
    handle = torch.nn.modules.module.register_module_forward_hook(count)
    # EAGLE drafts with its head, not with the drafter the pair's tuned.json was measured with: said, not applied
    expected = (pytest.warns(TunedForAnotherDrafterWarning, match="measured with") if framework == "eagle"
                else contextlib.nullcontext())
    try:
        with expected:
            result = CliRunner().invoke(cli, ["generate", "--pair", str(demo_pair_paths().root), "--framework", framework,
                                              *(["--mode", mode] if mode else []), "--prompt", demo_snippet(),
                                              "--max-new-tokens", "12", "--no-show-tiers", "--no-color"])
    finally:
        handle.remove()
    assert result.exit_code == 0, result.output
    pieces = [(message, seen) for err, nl, message, seen in writes if not err and not nl and message]
    assert len(pieces) >= 2
    assert pieces[0][1] < forwards[0], "the answer was written only after the last forward"
    assert "".join(message for message, _ in pieces) + "\n" == result.stdout
    summary = [seen for err, _, message, seen in writes if err and "tokens in" in message]
    assert summary == [forwards[0]]  # on stderr, after the run


@pytest.fixture(scope="module")
def demo_pair():
    from viasd_adapt.config.resolve import resolve_settings
    from viasd_adapt.models.pair import load_pair

    paths = demo_pair_paths()
    spec = resolve_settings(pair_mask=paths.mask)
    return load_pair(paths.target, paths.draft, spec.mask_path, device="cpu", eagle_head=paths.eagle_head,
                     read_masks=spec.masks)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize("framework,mode", STREAMED + [("hf", "plain"), ("lookup", "plain")])
def test_no_framework_provokes_a_deprecation_from_transformers_generation(framework, mode, demo_pair):
    """Neither a Python warning (FutureWarning, DeprecationWarning) raised from transformers nor a
    deprecation notice logged by its generation code, in any framework the commands run."""
    if framework == "eagle":
        pytest.importorskip("eagle.model.ea_model")
    from transformers.utils import logging as hf_logging

    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.prompts.splits import demo_snippet

    logging.Logger.warning_once.cache_clear()  # transformers logs each notice once per process
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    handler = _Records()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    ids = demo_pair.tokenizer(demo_snippet())["input_ids"]
    settings = TierSettings(mode="none" if mode in (None, "plain") else mode)
    request = (RunRequest.stock_run if mode == "plain" or framework == "lookup" else RunRequest.tiered)(ids, 12, settings)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            frameworks.run(framework, demo_pair, request)
    finally:
        logger.removeHandler(handler)
        hf_logging.set_verbosity(verbosity)
    raised = [f"{w.category.__name__}: {w.message} ({w.filename})" for w in caught
              if issubclass(w.category, (FutureWarning, DeprecationWarning)) and f"{os.sep}transformers{os.sep}" in w.filename]
    assert not raised
    logged = [r.getMessage() for r in handler.records
              if r.name.startswith("transformers.generation") and "deprecat" in r.getMessage().lower()]
    assert not logged


def test_the_token_stream_writes_whole_characters_stops_at_the_budget_and_at_eos_and_styles_by_tier():
    from viasd_adapt.bench.display import PLAIN_MARKERS, TokenStream
    from viasd_adapt.core.tiers import Tier
    from viasd_adapt.training.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["def f(x):\n    return x\n", "print('caf\u00e9 na\u00efve \u2603')\n"] * 20, 300)
    ids = tokenizer("print('caf\u00e9 \U0001F600 \u00fc') and more")["input_ids"][1:]  # unseen: split into bytes
    full = tokenizer.decode(ids, skip_special_tokens=False)
    pieces: list[str] = []
    stream = TokenStream(tokenizer, pieces.append, show_tiers=False)
    for token in ids:  # one token at a time, as a stream gets them
        stream.push([token], [int(Tier.DRAFT)])
    stream.close()
    assert "".join(pieces) == full and not any("\ufffd" in piece for piece in pieces)
    assert any(len(tokenizer.decode([t])) and "\ufffd" in tokenizer.decode([t]) for t in ids)  # bytes split characters

    eos = tokenizer.eos_token_id
    pieces.clear()
    stream = TokenStream(tokenizer, pieces.append, show_tiers=False, limit=len(ids) + 5, eos=[eos])
    stream.push(ids[:3] + [eos] + ids[3:])  # EOS ends the answer; it is not written; later tokens are not either
    assert "".join(pieces) == tokenizer.decode(ids[:3]) and stream.count == 4

    pieces.clear()
    stream = TokenStream(tokenizer, pieces.append, show_tiers=True, colour=False, limit=2)
    stream.push(ids, [int(Tier.FULL)] * len(ids))  # the budget stops it
    opening, closing = PLAIN_MARKERS[Tier.FULL]
    assert stream.count == 2 and all(p.startswith(opening) and p.endswith(closing) for p in pieces)


def test_stock_prompt_lookup_has_no_tier_mode():
    result = CliRunner().invoke(cli, ["generate", "--framework", "lookup", "--mode", "lossy", "--prompt", "x"])
    assert result.exit_code == 2 and "--mode lossy: --framework lookup cannot use tier settings (lookup has no tier" \
        in result.output
