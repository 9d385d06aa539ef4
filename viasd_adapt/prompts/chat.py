"""Prompts through the tokenizer's chat template.

Instruct models are trained on their chat format: a bare question fed to SmolLM2-Instruct is
continued as text, not answered, and both its answers and the drafter's acceptance change. So
every command that turns text into prompt ids (``generate``, ``bench``, ``tune``, ``search``
calibration, ``demo``) goes through :func:`encode_prompt`, with ``--chat``:

* ``auto`` (default): the template when the tokenizer has one, plain text otherwise;
* ``on``: the template, and an error naming the tokenizer when it has none;
* ``off``: plain text, also for a tokenizer with a template (a completion-style prompt).

Multi-turn conversations (MT-bench's second turn) are lists of messages; without a template
their turns are joined by blank lines.
"""

from __future__ import annotations

from typing import Any, Sequence

from viasd_adapt.errors import ConfigError

CHAT_CHOICES = ("auto", "on", "off")


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def uses_chat(tokenizer: Any, chat: str = "auto") -> bool:
    """Whether prompts go through the template under ``--chat chat``."""
    if chat not in CHAT_CHOICES:
        raise ConfigError(f"--chat must be one of {', '.join(CHAT_CHOICES)}, got {chat!r}")
    if chat == "off":
        return False
    if has_chat_template(tokenizer):
        return True
    if chat == "on":
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ConfigError(f"--chat on: the tokenizer {name} has no chat template; use --chat off (or auto) for plain-text prompts")
    return False


def user_turns(turns: Sequence[str], answers: Sequence[str] = ()) -> list[dict[str, str]]:
    """Messages for a conversation: user turn 1, assistant answer 1, user turn 2, ..."""
    if not turns:
        raise ConfigError("a conversation needs at least one user turn")
    if len(answers) != len(turns) - 1:
        raise ConfigError(f"{len(turns)} user turns need {len(turns) - 1} assistant answers, got {len(answers)}")
    messages: list[dict[str, str]] = []
    for number, turn in enumerate(turns):
        messages.append({"role": "user", "content": turn})
        if number < len(answers):
            messages.append({"role": "assistant", "content": answers[number]})
    return messages


def _ids(encoded: Any) -> list[int]:
    """transformers 4.x returns a list of ids, 5.x a BatchEncoding; either way, the ids."""
    if hasattr(encoded, "keys") and "input_ids" in encoded:
        encoded = encoded["input_ids"]
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    if encoded and isinstance(encoded[0], list):
        encoded = encoded[0]
    return [int(i) for i in encoded]


def encode_messages(tokenizer: Any, messages: Sequence[dict[str, str]], chat: str = "auto") -> list[int]:
    """Prompt ids for a conversation that the assistant answers next."""
    if uses_chat(tokenizer, chat):
        return _ids(tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True))
    text = "\n\n".join(message["content"] for message in messages)
    return _ids(tokenizer(text)["input_ids"])


def encode_prompt(tokenizer: Any, text: str, chat: str = "auto") -> list[int]:
    """Prompt ids for one user turn (``--prompt``, a prompts file line, a calibration prompt)."""
    if not text:
        return []
    return encode_messages(tokenizer, user_turns([text]), chat)


__all__ = ["encode_prompt"]
