"""An EAGLE head folder as a run reads it: its format, the digest of its target, its embedding put back.

A head trained here (:mod:`viasd_adapt.training.eagle_head`, :mod:`viasd_adapt.training.eagle_distill`)
records :data:`HEAD_FORMAT` and a digest of its target's weights (:func:`target_weights_digest`), so
that the EAGLE adapter refuses it on any other base model. A distilled head is written without its
copy of the target's token embedding (frozen, 57 MB for SmolLM2 in fp16; the config says
``"viasd_embedding": "target"``); :func:`complete_head` writes, once, a cached folder in eagle's
exact format with the base model's embedding put back, which ``EaModel.from_pretrained`` loads with
its ``strict=True``. Every run of the eagle framework reads heads through this module, so it lives
with the loading of pairs, not with the training that writes them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from viasd_adapt.config.cache_records import CompletedHeadDigests
from viasd_adapt.errors import ConfigError, ViasdError

EMBEDDING_KEY = "embed_tokens.weight"
SHARED_EMBEDDING = "target"  # value of the config's "viasd_embedding"

HEAD_FORMAT = "viasd-adapt/eagle-head"


def target_weights_digest(target_path: str | Path, max_bytes: int = 8 << 20) -> str:
    """A digest of the target checkpoint's weight files (first ``max_bytes`` of each, plus sizes).

    Cheap even for large checkpoints, and different for any two differently trained models.
    """
    root = Path(target_path)
    files = sorted(root.glob("*.safetensors")) or sorted(root.glob("*.bin"))
    if not files:
        raise ViasdError(f"no weight files (*.safetensors or *.bin) in {root}")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + str(path.stat().st_size).encode() + b"\0")
        with path.open("rb") as handle:
            digest.update(handle.read(max_bytes))
    return digest.hexdigest()


def needs_embedding(head_path: str | Path) -> bool:
    """Whether the head at ``head_path`` was written without its embedding (see module docstring)."""
    try:
        fields = json.loads((Path(head_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(fields, dict) and fields.get("viasd_embedding") == SHARED_EMBEDDING


def complete_head(head_path: str | Path, base_model_path: str | Path) -> Path:
    """``head_path`` itself for an ordinary head; for one written without its embedding, a cached
    folder (``<cache>/eagle_heads/<digest>/``) in eagle's exact format, with the base model's
    embedding put back. Made once per head and base model, written whole or not at all."""
    from safetensors import safe_open

    from viasd_adapt.io import file_digest, write_directory
    from viasd_adapt.models.registry import cache_dir

    head_path, base_model_path = Path(head_path), Path(base_model_path)
    if not needs_embedding(head_path):
        return head_path
    weights = head_path / "pytorch_model.bin"
    digest = hashlib.sha256()
    for path in (head_path / "config.json", weights):
        try:
            digest.update(path.read_bytes())
        except OSError as err:
            raise ViasdError(f"cannot read the EAGLE head file {path}: {err.strerror or err}") from None
    files = sorted(base_model_path.glob("*.safetensors"))
    for path in files:
        digest.update(path.name.encode() + str(path.stat().st_size).encode())
    folder = cache_dir() / "eagle_heads" / digest.hexdigest()[:32]
    problem = completed_head_problem(folder)
    if problem is None:
        return folder
    if problem != "missing":
        from viasd_adapt.cache_check import report_unusable

        report_unusable(f"the completed EAGLE head {folder}", problem, stacklevel=3)
    embedding = None
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            if "model.embed_tokens.weight" in handle.keys():
                embedding = handle.get_tensor("model.embed_tokens.weight")
    if embedding is None:
        raise ViasdError(f"the EAGLE head in {head_path} takes its embedding from the base model, but {base_model_path} "
                         "has no model.embed_tokens.weight in a safetensors file")
    state = torch.load(weights, map_location="cpu")
    if EMBEDDING_KEY in state:
        raise ViasdError(f"{weights} holds an embedding although its config says it takes the base model's")
    fields = json.loads((head_path / "config.json").read_text(encoding="utf-8"))
    dtype = next(iter(state.values())).dtype
    state[EMBEDDING_KEY] = embedding.to(dtype)

    def write(directory: Path) -> None:
        torch.save(state, directory / "pytorch_model.bin")
        (directory / "config.json").write_text(json.dumps(fields, indent=2) + "\n", encoding="utf-8")
        CompletedHeadDigests(files={name: file_digest(directory / name) for name in COMPLETED_FILES}).save(
            directory / DIGESTS_FILE)

    write_directory(folder, write, "completed EAGLE head")
    _CHECKED.add(folder)
    return folder


#: The files of a completed head, and the record of their sha256 written beside them.
COMPLETED_FILES = ("config.json", "pytorch_model.bin")
DIGESTS_FILE = "viasd_digests.json"
_CHECKED: set[Path] = set()  # folders whose digests matched in this process (read once, not per load)


def completed_head_problem(folder: Path) -> str | None:
    """Why the cached completed head in ``folder`` cannot be used (None: it can): ``"missing"``
    when there is none yet; a folder written before digests were recorded is rebuilt (cheap: one
    head file); a file whose sha256 is not the recorded one is damaged."""
    from viasd_adapt.io import file_digest

    if folder in _CHECKED and all((folder / name).is_file() for name in COMPLETED_FILES):
        return None
    if not all((folder / name).is_file() for name in COMPLETED_FILES):
        return "missing"
    try:
        record = CompletedHeadDigests.load(folder / DIGESTS_FILE)
    except ConfigError:
        return "missing"  # written before digests were recorded (or as an untyped record): made again, silently
    for name in COMPLETED_FILES:
        if record.files.get(name) != file_digest(folder / name):
            return f"{name} does not match the digest recorded when it was written (damaged or edited)"
    _CHECKED.add(folder)
    return None


__all__ = ["COMPLETED_FILES", "DIGESTS_FILE", "EMBEDDING_KEY", "HEAD_FORMAT", "SHARED_EMBEDDING", "complete_head",
           "completed_head_problem", "needs_embedding", "target_weights_digest"]
