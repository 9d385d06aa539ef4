"""GGUF files as model paths: read once through transformers, then served from a cache.

transformers reads a GGUF file (``from_pretrained(folder, gguf_file=name)``) by dequantizing every
tensor to float, which takes about 20 s for SmolLM2-135M on 2 cores, on every load. The first load
of a file saves the dequantized model and its tokenizer as an ordinary ``save_pretrained`` folder
under ``<cache>/gguf/<sha256 of the file>/``; later loads read that folder (safetensors, a few
seconds). Keying by the file's content, not its path, means a moved or renamed copy still hits the
cache and a changed file never reads a stale one. The folder records the transformers version
that dequantized it and is rebuilt under another one (its GGUF readers change between releases).

Weights are saved in float32 by default: Q4_1 blocks dequantize to ``scale * q + min`` in float32,
which float16 would round. A run that loads its weights in bfloat16 or float16 (``viasd models add
--dtype``, ``load_pair(..., dtype=)``) gets a cache entry of its own in that dtype
(``<sha256>-bfloat16/``), half the disk space. A mask's fingerprint samples the weights with a
tolerance that covers a cast (:func:`viasd_adapt.routing.mask.model_fingerprint`): a mask searched
on the bfloat16 weights of a file holds for its float32 weights, and is refused for any other model.

Before a first load writes a cache entry, a line on stderr says how many parameters the file
holds, how much disk the entry takes and how much is free; an entry that would not fit is refused
before any dequantizing. A first load of a 0.63B-parameter Qwen2-shaped file took 63 s with a
core to itself and 9 minutes on 2 cores shared with heavier work (docs/results.md, "Your own
pair"): about 2 and 15 minutes per billion parameters. It needs memory for the float32 weights
twice over while it dequantizes.

Everything a GGUF load can fail on gets a :class:`~viasd_adapt.errors.ViasdError` naming the
``.gguf`` file the user gave (never only the cache folder): the ``gguf`` package missing (``pip
install 'viasd-adapt[gguf]'``), a file that is not GGUF, a truncated or corrupt one, an
architecture transformers cannot read, a cache that cannot be written (a full disk).

The cache checks what it holds: ``gguf_source.json`` records the sha256 of every file of the
entry, checked once per process before the entry is used. A damaged entry (a truncated or altered
weights file, a lost file) is rebuilt from the ``.gguf`` with a :class:`GGUFCacheRebuiltWarning`;
temporary folders that a killed load left in the cache are swept on the next load.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

from viasd_adapt.config.cache_records import GGUFCacheRecord
from viasd_adapt.config.schema import read_json
from viasd_adapt.errors import ConfigError, UnsupportedModelError, ViasdError
from viasd_adapt.io import file_digest, make_folder, sweep_stale_temporaries, write_directory
from viasd_adapt.memory import release_free_memory
from viasd_adapt.models.registry import cache_dir

GGUF_SUFFIX = ".gguf"
GGUF_MAGIC = b"GGUF"
CACHE_FORMAT = 2  # bump when what a cached folder holds changes (2: file digests recorded)
SOURCE_FILE = "gguf_source.json"
INSTALL_HINT = "pip install 'viasd-adapt[gguf]' (the gguf and accelerate packages)"


def is_gguf_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a GGUF file (by its suffix; the content is checked on load)."""
    return str(path).lower().endswith(GGUF_SUFFIX)


def file_sha256(path: Path) -> str:
    return file_digest(path)


def _require_gguf_package() -> None:
    from transformers.utils import is_gguf_available

    if not is_gguf_available():
        raise ConfigError(f"reading a .gguf model needs the gguf package: {INSTALL_HINT}")


def gguf_architecture(path: Path) -> str:
    """The file's ``general.architecture``, after checking that it is a whole, readable GGUF file."""
    _require_gguf_package()
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic != GGUF_MAGIC:
        raise ViasdError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        field = reader.fields["general.architecture"]
        architecture = bytes(field.parts[field.data[0]]).decode("utf-8")
        for tensor in reader.tensors:  # a truncated file fails here: its tensors run past the end
            if tensor.data_offset + tensor.n_bytes > os.path.getsize(path):
                raise ValueError(f"tensor {tensor.name} runs past the end of the file")
    except ViasdError:
        raise
    except Exception as err:  # noqa: BLE001 - GGUFReader raises anything from struct errors to IndexError
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ViasdError(f"{path} is a truncated or corrupt GGUF file ({detail})") from None
    return architecture


def _supported_architectures() -> set[str]:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    supported = set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}
    try:
        from transformers.integrations.gguf import GGUF_ARCHS

        supported |= set(GGUF_ARCHS)
    except ImportError:  # transformers 4.x has only the legacy list
        pass
    return supported


def check_gguf_file(path: str | os.PathLike) -> Path:
    """``path`` as a GGUF file transformers can read, or a clear error saying why not."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ViasdError(f"GGUF file {path} does not exist")
    if not path.is_file():
        raise ViasdError(f"{path} is not a file (a .gguf model is one file)")
    architecture = gguf_architecture(path)
    supported = _supported_architectures()
    if architecture.replace("-", "_") not in supported and architecture not in supported:
        raise UnsupportedModelError(
            f"{path} holds a {architecture!r} model, which this transformers cannot read from GGUF "
            f"(readable: {', '.join(sorted(supported))})")
    return path


class GGUFCacheRebuiltWarning(UserWarning):
    """A damaged GGUF cache entry was found and is being rebuilt from the .gguf file."""


def _cache_root() -> Path:
    return cache_dir() / "gguf"


#: A first load's minutes per billion parameters, measured with a core to itself and on 2 cores
#: shared with heavier work (docs/results.md, "Your own pair"): what the note before a first load
#: says to expect.
FIRST_LOAD_MINUTES_PER_B = (2, 15)

#: Bytes per parameter of a cache entry, by the dtype its weights are saved in.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _entry_name(sha256: str, dtype: str) -> str:
    """The cache folder's name: the file's digest (float32, as before dtypes existed), else ``<digest>-<dtype>``."""
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"unknown dtype {dtype!r} for a GGUF cache (known: {', '.join(DTYPE_BYTES)})")
    return sha256 if dtype == "float32" else f"{sha256}-{dtype}"


def gguf_parameter_count(path: Path) -> int:
    """How many parameters the GGUF file holds (every tensor's elements), read from its header."""
    from gguf import GGUFReader

    return sum(int(tensor.n_elements) for tensor in GGUFReader(str(path)).tensors)


def _say(line: str) -> None:
    """A note to the user on stderr (the answer of ``viasd generate`` is stdout's alone)."""
    import sys

    print(line, file=sys.stderr, flush=True)


def check_cache_space(path: Path, root: Path, dtype: str, say=_say) -> int:
    """Says, before a first load writes it, how large the cache entry of ``path`` will be and how much
    space ``root`` has; refuses by name an entry that would not fit. Returns the bytes it will take."""
    parameters = gguf_parameter_count(path)
    needed = parameters * DTYPE_BYTES[dtype]
    make_folder(root, "GGUF cache folder")
    free = shutil.disk_usage(root).free
    say(f"first load of {path.name}: dequantizing {parameters / 1e9:.2f}B parameters into a {dtype} cache of "
        f"{needed / 1e9:.1f} GB in {root} ({free / 1e9:.1f} GB free); once per file, about {FIRST_LOAD_MINUTES_PER_B[0]:g} min "
        f"per billion parameters with a free core, up to {FIRST_LOAD_MINUTES_PER_B[1]:g} on busy ones")
    if needed * 1.05 > free:
        raise ViasdError(f"the {dtype} cache of {path} needs {needed / 1e9:.1f} GB and {root} has {free / 1e9:.1f} GB free: "
                         "free some space, set VIASD_CACHE to a folder with room, or load in bfloat16 (half the size)")
    return needed


#: Cache folders whose file digests were checked in this process (checked once, not on every load).
_VERIFIED: set[Path] = set()


def _entry_problem(folder: Path, transformers_version: str) -> str | None:
    """Why the cache entry ``folder`` cannot be used as it is (None: it can). A missing entry and one
    written by another transformers or an older cache format are simply stale; anything else
    (a file missing, altered or truncated) is damage."""
    if not (folder / SOURCE_FILE).is_file():
        return "missing"
    try:
        data = read_json(folder / SOURCE_FILE, GGUFCacheRecord.WHAT)
    except ConfigError:
        return f"its {SOURCE_FILE} is unreadable"
    if not isinstance(data, dict) or data.get("format") not in (CACHE_FORMAT, GGUFCacheRecord.FORMAT):
        return "stale"  # a layout before the record said what it is
    try:
        source = GGUFCacheRecord.from_json(data, str(folder / SOURCE_FILE))
    except ConfigError as err:
        return f"its {SOURCE_FILE} is not a cache record this version reads ({err})"
    if source.cache != CACHE_FORMAT or source.transformers != transformers_version:
        return "stale"
    digests = source.files
    if "config.json" not in digests:
        return f"its {SOURCE_FILE} lists no files"
    if folder in _VERIFIED:
        return None
    for name, expected in digests.items():
        file = folder / name
        if not file.is_file():
            return f"{name} is missing"
        if file_digest(file) != expected:
            return f"{name} does not match the digest recorded when it was written"
    _VERIFIED.add(folder)
    return None


def _dequantize_into(path: Path, folder: Path, sha256: str, transformers_version: str, dtype: str = "float32") -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its per-tensor progress bar and notes are not the user's business
    try:
        # built in the dtype asked: transformers' reader dequantizes each tensor to float32 arrays, which are cast as
        # they load, so a bfloat16 entry never holds a float32 copy of the whole model beside the arrays
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=getattr(torch, dtype))
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ViasdError(f"transformers could not read the GGUF model {path}: {detail}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    model.config.name_or_path = path.name  # the folder, not the developer's path, names it from now on
    # The weights are plain floats now: saved as such, the folder loads without GGUF's quantizer.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        model.save_pretrained(str(folder), safe_serialization=True)
        tokenizer.save_pretrained(str(folder))
    except OSError:
        raise  # write_directory names the folder and the cause
    except Exception as err:  # noqa: BLE001 - safetensors raises its own SafetensorError (e.g. on a full disk)
        raise OSError(28 if "space" in str(err).lower() else 5, str(err).strip().splitlines()[0]) from None
    files = {entry.name: file_digest(entry) for entry in sorted(folder.iterdir()) if entry.is_file()}
    GGUFCacheRecord(cache=CACHE_FORMAT, file=path.name, sha256=sha256, transformers=transformers_version,
                    dtype=dtype, files=files).save(folder / SOURCE_FILE)


def gguf_model_folder(path: str | os.PathLike, rebuild: bool = False, dtype: str = "float32") -> Path:
    """The cached ``save_pretrained`` folder of a GGUF file (model and tokenizer), made on first use,
    checked before use (module docstring) and rebuilt when damaged; ``rebuild`` forces a rebuild
    (a caller that could not load the entry). ``dtype``: the dtype the entry's weights are saved in
    (each dtype has an entry of its own).

    The folder is written beside its final place and renamed in (:func:`viasd_adapt.io.write_directory`),
    so an interrupted first load leaves no half-written cache entry, and temporary folders left by
    killed loads are swept first.
    """
    import transformers

    path = Path(path).expanduser()
    if not path.is_file():
        check_gguf_file(path)  # says what the path is instead
    sha256 = file_sha256(path)
    root = _cache_root()
    folder = root / _entry_name(sha256, dtype)
    version = transformers.__version__
    problem = "unloadable" if rebuild else _entry_problem(folder, version)
    if problem is None:
        return folder
    if problem not in ("missing", "stale", "unloadable"):  # (a caller that could not load it has said so)
        warnings.warn(f"viasd-adapt: the cached copy of {path.name} in {folder} is damaged ({problem}); rebuilding it "
                      "from the .gguf file", GGUFCacheRebuiltWarning, stacklevel=3)
    _VERIFIED.discard(folder)
    sweep_stale_temporaries(root)
    check_gguf_file(path)  # parsing the whole header takes seconds: only before a first read
    check_cache_space(path, root, dtype)
    try:
        write_directory(folder, lambda tmp: _dequantize_into(path, tmp, sha256, version, dtype), what="GGUF cache folder")
    except ViasdError as err:
        raise ViasdError(f"cannot cache the dequantized model of {path}: {err} (free some space, or set "
                         f"VIASD_CACHE to a writable folder with room for it)") from None
    _VERIFIED.add(folder)
    release_free_memory()  # the float32 copy of every weight is freed: 2.5 GB stayed resident at 0.5B parameters
    return folder


def load_gguf(path: Path, load, dtype: str = "float32"):
    """``load(folder)`` on the cache folder of the GGUF file ``path`` (its ``dtype`` entry); when the
    entry cannot be loaded (damaged in a way its digests did not show), it is rebuilt once and loaded
    again. Errors name ``path``, the file the user gave."""
    folder = gguf_model_folder(path, dtype=dtype)  # a file that cannot be read or cached fails here, naming itself
    try:
        return load(folder)
    except ViasdError as first:
        warnings.warn(f"viasd-adapt: the cached copy of {path.name} could not be loaded ({first}); rebuilding it "
                      "from the .gguf file", GGUFCacheRebuiltWarning, stacklevel=3)
    try:
        return load(gguf_model_folder(path, rebuild=True, dtype=dtype))
    except ViasdError as err:
        raise ViasdError(f"cannot load the GGUF model {path}: {err}") from None


def forget_cache_entry(path: str | os.PathLike, dtype: str = "float32") -> None:
    """Removes the ``dtype`` cache entry of a GGUF file (the next load dequantizes it again)."""
    folder = _cache_root() / _entry_name(file_sha256(Path(path).expanduser()), dtype)
    _VERIFIED.discard(folder)
    shutil.rmtree(folder, ignore_errors=True)


__all__ = ["DTYPE_BYTES", "GGUFCacheRebuiltWarning", "GGUF_SUFFIX", "INSTALL_HINT", "check_cache_space", "check_gguf_file",
           "file_sha256", "forget_cache_entry", "gguf_architecture", "gguf_model_folder", "gguf_parameter_count",
           "is_gguf_path", "load_gguf"]
