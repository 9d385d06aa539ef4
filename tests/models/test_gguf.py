"""GGUF files as model paths (viasd_adapt.models.gguf): read through transformers once, then from the
cache; every way a GGUF load can fail gets a clear error. The files are written in the test
(tests/support/gguf.py), so the suite never needs the 93 MB SmolLM2 wheel."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from click.testing import CliRunner
from viasd_adapt.routing.mask import load_mask

pytest.importorskip("gguf")

from tests.support.gguf import write_tiny_gguf  # noqa: E402
from viasd_adapt.errors import ConfigError, UnsupportedModelError, ViasdError  # noqa: E402
from viasd_adapt.models import gguf as gguf_module  # noqa: E402
from viasd_adapt.models.tiny import tiny_model  # noqa: E402
from viasd_adapt.models.loading import load_model, load_tokenizer  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("VIASD_CACHE", str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    model = tiny_model("llama", seed=3, vocab_size=64)
    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", model)
    return path, model


def test_a_gguf_loads_like_transformers_reads_it_and_the_second_load_comes_from_the_cache(cache, tiny_gguf, monkeypatch):
    from transformers import AutoModelForCausalLM

    path, original = tiny_gguf
    model = load_model(path, CPU, "target")
    direct = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    ids = torch.tensor([[3, 9, 4, 17, 5]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, direct(ids).logits)
        assert torch.allclose(model(ids).logits, original(ids).logits, atol=1e-5)  # the writer's layout round-trips
    folder = cache / "gguf" / gguf_module.file_sha256(path)
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert not list(folder.glob("*.gguf"))  # the cache holds the dequantized model, not a copy of the file

    def no_second_read(*args, **kwargs):
        raise AssertionError("the GGUF file was dequantized again")

    monkeypatch.setattr(gguf_module, "_dequantize_into", no_second_read)
    again = load_model(path, CPU, "target")
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)
    moved = cache.parent / "renamed.gguf"  # keyed by content: a renamed copy hits the same entry
    shutil.copy(path, moved)
    load_model(moved, CPU, "target")


def test_the_tokenizer_and_its_chat_template_come_with_the_gguf(cache, tiny_gguf):
    from viasd_adapt.prompts.chat import encode_prompt, has_chat_template

    path, _ = tiny_gguf
    tokenizer = load_tokenizer(path)
    assert tokenizer.eos_token_id == 1 and has_chat_template(tokenizer)
    plain, chat = encode_prompt(tokenizer, "ab", "off"), encode_prompt(tokenizer, "ab", "on")
    assert plain == [2] and len(chat) > len(plain) and chat[-1] != 1


def test_a_mask_searched_on_the_gguf_model_loads_for_the_cached_model(cache, tiny_gguf, tmp_path):
    from viasd_adapt.config.mask import MaskArtifact, RoutingMask
    from viasd_adapt.routing.mask import model_fingerprint

    path, _ = tiny_gguf
    first = load_model(path, CPU, "target")
    artifact = MaskArtifact(RoutingMask.from_skipped(6, [2, 3]), ratio=2 / 6, fingerprint=model_fingerprint(first))
    saved = artifact.save(tmp_path / "mask.json")
    second = load_model(path, CPU, "target")
    assert load_mask(saved, second).mask.skipped == (2, 3)
    with pytest.raises(ViasdError):
        load_mask(saved, tiny_model("llama", seed=4, vocab_size=64))


def test_a_truncated_gguf_is_refused_by_name(cache, tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ViasdError, match="truncated or corrupt GGUF"):
        load_model(cut, CPU, "target")
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    with pytest.raises(ViasdError, match="truncated or corrupt GGUF"):
        load_model(garbage, CPU, "target")
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ViasdError, match="not a GGUF file"):
        load_tokenizer(not_gguf)
    assert not (cache / "gguf").exists() or not any((cache / "gguf").iterdir())


def test_an_architecture_transformers_cannot_read_is_refused_by_name(cache, tmp_path):
    path = write_tiny_gguf(tmp_path / "odd.gguf", tiny_model("llama", seed=0, vocab_size=64), architecture="rwkv9")
    with pytest.raises(UnsupportedModelError, match="'rwkv9' model"):
        load_model(path, CPU, "target")


def test_the_missing_gguf_package_is_named_with_the_extra_to_install(cache, tiny_gguf, monkeypatch):
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_gguf_available", lambda *a, **k: False)
    with pytest.raises(ConfigError, match=r"viasd-adapt\[gguf\]"):
        gguf_module.check_gguf_file(tiny_gguf[0])


def test_an_interrupted_first_load_leaves_no_cache_entry(cache, tiny_gguf, monkeypatch):
    path, _ = tiny_gguf
    original = gguf_module._dequantize_into

    def half_then_crash(source, folder, *args):
        original(source, folder, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_module, "_dequantize_into", half_then_crash)
    with pytest.raises(KeyboardInterrupt):
        load_model(path, CPU, "target")
    root = cache / "gguf"
    assert not root.exists() or [p.name for p in root.iterdir()] == []
    monkeypatch.setattr(gguf_module, "_dequantize_into", original)
    load_model(path, CPU, "target")  # and the next load builds it whole


def test_generate_takes_a_gguf_target_with_a_prompt_lookup_drafter(cache, tiny_gguf):
    from viasd_adapt.cli.main import cli

    path, _ = tiny_gguf
    result = CliRunner().invoke(cli, ["generate", "--target", str(path), "--draft", "prompt-lookup", "--framework", "hf",
                                      "--mode", "none", "--prompt", "abcabcab", "--max-new-tokens", "6", "--chat", "on",
                                      "--no-color"])
    assert result.exit_code == 0, result.output
    assert "6 tokens" in result.output


# ----------------------------------------------------------------------------- the cache checks what it holds


def _logits(model):
    with torch.no_grad():
        return model(torch.tensor([[3, 9, 4, 17, 5]])).logits


def _fresh_process(monkeypatch):
    """Forget which cache entries this process already checked (a new run checks them again)."""
    monkeypatch.setattr(gguf_module, "_VERIFIED", set())


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "delete"])
def test_a_damaged_cache_entry_is_rebuilt_from_the_gguf(cache, tiny_gguf, monkeypatch, damage):
    path, original = tiny_gguf
    good = _logits(load_model(path, CPU, "target"))
    weights = cache / "gguf" / gguf_module.file_sha256(path) / "model.safetensors"
    written = weights.read_bytes()
    data = bytearray(written)
    if damage == "flip a byte":  # inside a tensor: the file still parses, the values are wrong
        data[-7] ^= 0x10
        weights.write_bytes(bytes(data))
    elif damage == "truncate":
        weights.write_bytes(bytes(data[: len(data) // 2]))
    else:
        weights.unlink()
    _fresh_process(monkeypatch)
    with pytest.warns(gguf_module.GGUFCacheRebuiltWarning, match=r"cached copy of tiny.gguf .* is damaged"):
        again = load_model(path, CPU, "target")
    assert torch.equal(_logits(again), good)
    assert weights.read_bytes() == written  # rebuilt whole


def test_an_entry_checked_once_is_not_read_again_in_the_same_process(cache, tiny_gguf, monkeypatch):
    path, _ = tiny_gguf
    load_model(path, CPU, "target")
    read, digest = [], gguf_module.file_digest
    monkeypatch.setattr(gguf_module, "file_digest", lambda file: read.append(file) or digest(file))
    load_model(path, CPU, "target")
    load_tokenizer(path)
    assert read == [path] * 2  # only the .gguf's own digest (its cache key), never the entry's files


def test_an_entry_that_loads_badly_despite_its_digests_is_rebuilt_once(cache, tiny_gguf, monkeypatch):
    from viasd_adapt.models import loading

    path, _ = tiny_gguf
    good = _logits(load_model(path, CPU, "target"))
    real, calls = loading._load_folder, []

    def fails_first(folder, device, role, *dtype):
        calls.append(folder)
        if len(calls) == 1:
            raise ViasdError(f"cannot load the {role} model from {folder}: a weights file is damaged")
        return real(folder, device, role, *dtype)

    monkeypatch.setattr(loading, "_load_folder", fails_first)
    with pytest.warns(gguf_module.GGUFCacheRebuiltWarning, match="could not be loaded"):
        assert torch.equal(_logits(load_model(path, CPU, "target")), good)
    assert len(calls) == 2


def test_a_full_disk_is_a_clear_error_naming_the_gguf(cache, tiny_gguf, monkeypatch):
    import safetensors
    import transformers.modeling_utils

    path, _ = tiny_gguf

    def no_space(*args, **kwargs):
        raise safetensors.SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                                          "message: \"No space left on device\" })")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", no_space)
    with pytest.raises(ViasdError, match=r"cannot cache the dequantized model of .*tiny\.gguf.*No space left") as err:
        load_model(path, CPU, "target")
    assert "VIASD_CACHE" in str(err.value)
    root = cache / "gguf"
    assert not root.exists() or [p.name for p in root.iterdir()] == []  # nothing half-written left behind


def test_a_tokenizer_without_a_chat_template_is_named_by_its_gguf(cache, tmp_path):
    from viasd_adapt.prompts.chat import encode_prompt

    path = write_tiny_gguf(tmp_path / "plain.gguf", tiny_model("llama", seed=5, vocab_size=64), chat_template=False)
    tokenizer = load_tokenizer(path)
    with pytest.raises(ConfigError, match=r"plain\.gguf has no chat template"):
        encode_prompt(tokenizer, "ab", "on")


def test_temporary_folders_of_killed_loads_are_swept(cache, tiny_gguf):
    import subprocess
    import sys

    path, _ = tiny_gguf
    root = cache / "gguf"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = root / f".{gguf_module.file_sha256(path)}.pid{int(dead.stdout)}.abc.tmp"
    (stale / "sub").mkdir(parents=True)
    alive = root / f".other.pid{__import__('os').getpid()}.xyz.tmp"  # a write in progress (this process)
    alive.mkdir()
    load_model(path, CPU, "target")
    assert not stale.exists() and alive.exists()


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_the_gguf_cache_follows_the_process_umask(cache, tiny_gguf, umask):
    """A cache shared through VIASD_CACHE is readable by others as the umask allows, as pip's and the
    hub's caches are (safetensors writes the weights 0600, mkdtemp the folder 0700). 0o077 is the
    control: a private umask gives private files, so the modes come from the umask, not a constant."""
    import stat

    path, _ = tiny_gguf
    previous = os.umask(umask)
    try:
        folder = gguf_module.gguf_model_folder(path)
    finally:
        os.umask(previous)
    entries = [folder, *folder.rglob("*")]
    assert (folder / "model.safetensors") in entries
    for entry in entries:
        expected = (0o777 if entry.is_dir() else 0o666) & ~umask
        assert stat.S_IMODE(entry.stat().st_mode) == expected, (entry.name, oct(entry.stat().st_mode))


def test_a_bfloat16_entry_is_built_in_bfloat16_with_the_float32_entrys_values_rounded(cache, tiny_gguf, monkeypatch):
    """transformers builds the model in the dtype asked (its GGUF reader's float32 arrays are cast as
    they load): no float32 model is made on the way to a bfloat16 entry, and the values are the
    float32 entry's, rounded once."""
    from transformers import AutoModelForCausalLM

    path, _ = tiny_gguf
    real, asked = AutoModelForCausalLM.from_pretrained, []

    def spy(*args, **kwargs):
        asked.append(kwargs.get("dtype"))
        return real(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    half = load_model(path, CPU, "target", dtype="bfloat16")
    assert asked[0] == torch.bfloat16  # the dequantizing load itself, in bfloat16 (control: float32 below)
    full = load_model(path, CPU, "target")
    assert asked[2] == torch.float32
    assert next(half.parameters()).dtype == torch.bfloat16
    for (name, a), (_, b) in zip(half.state_dict().items(), full.state_dict().items()):
        assert torch.equal(a, b.to(torch.bfloat16)), name
