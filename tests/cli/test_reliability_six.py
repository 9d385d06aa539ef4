"""Reliability of what the product writes and reads around its pairs: outputs that are not plain
files, folders that cannot be made, one damaged pair among many, files a pair names that are gone,
and options checked against their domain before any model loads.

Each case has its control beside it: the same call on the ordinary input (a regular file, a
writable cache, a whole pair, a name in the rule) does what the case refuses or protects.
Device nodes are made in the test's own folder (``mknod``, as root), never the system's
``/dev/null`` or ``/dev/full``: a writer that replaced its output would replace only a copy.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from viasd_adapt.cli.main import cli
from viasd_adapt.config.pair_file import PairFile, PairTarget
from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt import io as vio
from viasd_adapt.models import registry
from viasd_adapt.models.registry import resolve_pair

REPO = Path(__file__).resolve().parents[2]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def refused(result, *needles):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in result.output, (needle, result.output)


def device(folder: Path, name: str, minor: int) -> Path:
    """A character device of the memory driver (3: null, 7: full) in ``folder``; skips where nodes
    cannot be made (not root, or a file system mounted nodev)."""
    path = folder / name
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        with open(path, "wb") as handle:
            handle.write(b"")
    except OSError as err:
        pytest.skip(f"cannot make a device node here: {err}")
    return path


# ----------------------------------------------------------------------------- the --json writer


def test_json_onto_a_fifo_reaches_its_reader_and_the_fifo_stays(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader waiting on it (never blocks the test)
    try:
        vio.write_json(fifo, {"tokens": [1, 2]})
        got = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert json.loads(got) == {"tokens": [1, 2]}
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    regular = tmp_path / "regular.json"  # control: a regular file is replaced by a rename, as before
    regular.write_text("old")
    vio.write_json(regular, {"tokens": [1, 2]})
    assert json.loads(regular.read_text()) == {"tokens": [1, 2]}


def test_json_onto_a_null_device_is_written_through_and_the_device_stays(tmp_path):
    null = device(tmp_path, "null", 3)
    assert vio.write_json(null, {"a": 1}) == null
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert vio.ensure_writable(null, "--json", force=False) == null  # no --force needed: nothing is replaced


def test_json_onto_a_full_device_is_an_error_naming_it_and_the_device_stays(tmp_path):
    full = device(tmp_path, "full", 7)
    with pytest.raises(ViasdError, match=rf"cannot write JSON file {full}: No space left on device"):
        vio.write_json(full, {"a": 1})
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_generate_json_onto_a_full_device_fails_and_never_says_wrote(char_pair, tmp_path):
    full = device(tmp_path, "full", 7)
    args = ["generate", "--target", char_pair / "target", "--draft", char_pair / "draft", "--prompt", "def f",
            "--max-new-tokens", 2, "--no-color", "--json"]
    result = invoke(*args, full)
    refused(result, f"{full}", "No space left on device")
    assert "wrote" not in result.output and stat.S_ISCHR(os.lstat(full).st_mode)
    control = invoke(*args, tmp_path / "out.json")
    assert control.exit_code == 0 and "wrote" in control.output, control.output


def test_json_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path):
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    vio.write_json(link, {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "new.json")
    vio.write_json(dangling, {"b": 2})
    assert dangling.is_symlink() and json.loads((tmp_path / "new.json").read_text()) == {"b": 2}


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1"])
def test_json_onto_stdout_by_name_is_written_to_the_process_output(name):
    code = f"from viasd_adapt.io import write_json; write_json({name!r}, {{'a': 1}}); print('after')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{\n  "a": 1\n}\nafter\n'


def test_a_socket_is_refused_by_name_and_left_alone(tmp_path):
    path = tmp_path / "s.json"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(ViasdError, match=rf"{path}: it is a socket, not a regular file"):
            vio.write_json(path, {"a": 1})
        with pytest.raises(ConfigError, match="is a socket, not a regular file"):
            vio.ensure_writable(path, "--json")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        server.close()


# ----------------------------------------------------------------------------- folders


def test_a_folder_under_a_file_is_one_line_naming_the_file(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    with pytest.raises(ViasdError, match=rf"cannot create the GGUF cache folder {blocker}/gguf: {blocker} is a file"):
        vio.make_folder(blocker / "gguf", "GGUF cache folder")
    assert vio.make_folder(tmp_path / "fresh" / "gguf", "GGUF cache folder").is_dir()  # control


@pytest.mark.parametrize("errno_name, reason", [("EROFS", "the file system is read-only"),
                                                ("EACCES", "permission denied")])
def test_a_folder_that_cannot_be_made_says_why(tmp_path, monkeypatch, errno_name, reason):
    import errno

    def refuse(self, *args, **kwargs):
        raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)))

    with monkeypatch.context() as scoped:
        scoped.setattr(Path, "mkdir", refuse)
        with pytest.raises(ViasdError, match=f"cannot create the work folder {tmp_path / 'x'}: {reason}"):
            vio.make_folder(tmp_path / "x", "work folder")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    pytest.importorskip("gguf")
    from tests.support.gguf import write_tiny_gguf
    from viasd_adapt.models.tiny import tiny_model

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "mine.gguf", tiny_model("llama", seed=7, vocab_size=64))


def test_a_cache_that_is_a_file_is_one_line_in_generate_and_models_add(tiny_gguf, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.write_text("a file")
    monkeypatch.setenv("VIASD_CACHE", str(cache))
    refused(invoke("generate", "--target", tiny_gguf, "--draft", "prompt-lookup", "--prompt", "x", "--max-new-tokens", 1),
            f"{cache} is a file, not a folder")
    refused(invoke("models", "add", "mine", "--target", tiny_gguf, "--draft", "prompt-lookup", "--no-progress"),
            f"{cache} is a file, not a folder")


def test_a_read_only_cache_is_one_line_in_generate(tiny_gguf, tmp_path, monkeypatch):
    """A read-only cache (the folder made, its writes refused), as the guarded helper sees it."""
    import errno

    monkeypatch.setenv("VIASD_CACHE", str(tmp_path / "cache"))

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    with monkeypatch.context() as scoped:
        scoped.setattr(Path, "mkdir", read_only)
        refused(invoke("generate", "--target", tiny_gguf, "--draft", "prompt-lookup", "--prompt", "x",
                       "--max-new-tokens", 1), f"{tmp_path / 'cache' / 'gguf'}: the file system is read-only")


def mkdir_calls(source: str) -> list[int]:
    """Lines of ``source`` that make a folder by hand (``.mkdir(``, ``os.makedirs(``, ``os.mkdir(``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("mkdir", "makedirs"):
            found.append(node.lineno)
    return found


def test_every_folder_the_product_makes_goes_through_the_guarded_helper():
    io_source = (REPO / "viasd_adapt" / "io.py").read_text()
    helper = next(n for n in ast.parse(io_source).body if isinstance(n, ast.FunctionDef) and n.name == "make_folder")
    offenders = []
    for path in sorted((REPO / "viasd_adapt").rglob("*.py")):
        for line in mkdir_calls(path.read_text()):
            if not (path.name == "io.py" and path.parent.name == "viasd_adapt"
                    and helper.lineno <= line <= helper.end_lineno):
                offenders.append(f"{path.relative_to(REPO)}:{line}")
    assert offenders == []
    assert mkdir_calls("from pathlib import Path\nPath('x').mkdir(parents=True)\n") == [2]  # control: one is seen


# ----------------------------------------------------------------------------- the registry


def declared_pair(folder: Path, char_pair: Path, **files) -> Path:
    """A pair folder declared by a ``pair.json`` naming the char pair's target and drafter where they
    are, with its mask copied beside it (and whatever ``files`` adds to the declaration)."""
    folder.mkdir(parents=True)
    (folder / "mask.json").write_bytes((char_pair / "mask.json").read_bytes())
    PairFile(target=PairTarget(path=str(char_pair / "target")), drafter=str(char_pair / "draft"), **files).save(
        folder / "pair.json")
    return folder


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setenv("VIASD_CACHE", str(folder))
    return folder


def test_one_damaged_pair_json_blocks_no_other_name_and_is_listed_as_damaged(cache, char_pair):
    declared_pair(cache / "good", char_pair, mask="mask.json")
    (cache / "broken").mkdir()
    (cache / "broken" / "pair.json").write_text("{not json")
    assert resolve_pair("good").target == char_pair / "target"
    assert resolve_pair("demo").source == "shipped"
    with pytest.raises(ViasdError, match="no model pair named 'nope'"):
        resolve_pair("nope")
    listed = invoke("models", "list")
    assert listed.exit_code == 0, listed.output
    damaged = next(line for line in listed.output.splitlines() if "DAMAGED:" in line)
    assert f"{cache / 'broken' / 'pair.json'}" in damaged and "not valid JSON" in damaged
    assert [line.split()[0] for line in listed.output.splitlines()[1:] if not line.startswith(" ")][:2] == ["broken", "good"]
    as_json = json.loads(invoke("models", "list", "--json").output)
    assert next(p for p in as_json if p["name"] == "broken")["damaged"]
    # control: the damaged pair itself, by name, is refused naming its file and the reason
    refused(invoke("generate", "--pair", "broken", "--prompt", "x"), f"{cache / 'broken' / 'pair.json'}", "not valid JSON")


def test_a_pair_folder_without_its_pair_json_says_so(cache, char_pair):
    folder = declared_pair(cache / "mine", char_pair, mask="mask.json")
    assert resolve_pair("mine").mask == folder / "mask.json"  # control: whole, it resolves
    (folder / "pair.json").unlink()
    with pytest.raises(ViasdError, match=rf"{folder / 'pair.json'} is missing") as raised:
        resolve_pair("mine")
    assert "no model pair named" not in str(raised.value)
    (folder / "mask.json").unlink()  # a folder holding nothing of a pair: no pair, said of the folder
    with pytest.raises(ViasdError, match=rf"{folder} holds no pair: no pair.json"):
        resolve_pair("mine")


@pytest.mark.parametrize("gone", ["mask.json", "tuned.json"])
def test_a_file_the_pair_json_names_that_is_gone_is_named_wherever_the_pair_is_used(cache, char_pair, gone):
    folder = declared_pair(cache / "mine", char_pair, mask="mask.json", tuned="tuned.json")
    (folder / "tuned.json").write_text("{}")
    assert resolve_pair("mine").mask == folder / "mask.json"  # control: whole, it resolves with its mask
    (folder / gone).unlink()
    named = rf"{folder / gone} \({gone.split('.')[0]}\)"
    with pytest.raises(ViasdError, match=named):
        resolve_pair("mine")
    from viasd_adapt.models.pair import load_pair

    with pytest.raises(ViasdError, match=named):
        load_pair("mine")
    refused(invoke("generate", "--pair", "mine", "--prompt", "x", "--max-new-tokens", 1), f"{folder / gone}")
    listed = invoke("models", "list")
    assert f"DAMAGED: {folder / 'pair.json'} names {folder / gone}" in listed.output


def test_an_interrupted_add_says_the_pair_can_be_resumed(cache):
    refused(invoke("generate", "--pair", "mine", "--prompt", "x"), "no model pair named 'mine'")  # control
    (cache / ".mine.adding").mkdir()
    refused(invoke("generate", "--pair", "mine", "--prompt", "x"), "interrupted `viasd models add mine`",
            str(cache / ".mine.adding"), "again to resume it", "--restart")


# ----------------------------------------------------------------------------- domains, before any model


def models_add_in_a_fresh_process(*args: str) -> tuple[int, str, bool]:
    """``viasd models add ARGS`` in a new interpreter: its exit status, its error output, and whether
    torch had been imported when it ended."""
    code = ("import sys\nfrom viasd_adapt.cli.main import cli\n"
            "try:\n    cli.main(sys.argv[1:], prog_name='viasd')\n"
            "except SystemExit as done:\n    print('torch' in sys.modules, file=sys.stderr); sys.exit(done.code)\n")
    done = subprocess.run([sys.executable, "-c", code, "models", "add", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    return done.returncode, done.stderr, done.stderr.strip().endswith("True")


@pytest.mark.parametrize("name, why", [("a b", "not a pair name"), ("tab\there", "not a pair name"),
                                       ("café", "not a pair name"), (".hidden", "not a pair name"),
                                       ("x" * 300, "at most 64 characters"), ("demo", "shipped with viasd-adapt")])
def test_a_pair_name_outside_the_rule_is_refused_before_torch_is_imported(tiny_gguf, tmp_path, name, why):
    status, said, torch_imported = models_add_in_a_fresh_process(name, "--target", str(tiny_gguf), "--draft",
                                                                  "prompt-lookup", "--out", str(tmp_path))
    assert status == 2 and why in said and "Traceback" not in said, said
    assert not torch_imported


def test_the_reserved_names_are_the_shipped_pairs_and_a_name_in_the_rule_passes():
    from viasd_adapt.tuning.onboard import check_name

    assert {"demo", "demo-ee", "smollm2"} <= set(registry.shipped_names())
    for name in registry.shipped_names():
        with pytest.raises(ConfigError, match="shipped"):
            check_name(name)
    check_name("my-pair_2")  # control
    check_name("x" * 64)


@pytest.mark.parametrize("minutes", ["inf", "nan", "-inf", "0"])
def test_minutes_outside_finite_positive_are_refused_before_torch(tiny_gguf, tmp_path, minutes):
    status, said, torch_imported = models_add_in_a_fresh_process("mine", "--target", str(tiny_gguf), "--draft",
                                                                  "prompt-lookup", "--out", str(tmp_path),
                                                                  "--minutes", minutes)
    assert status == 2 and "--minutes" in said and not torch_imported, said


def test_an_existing_pair_is_refused_before_torch_and_a_free_name_is_not(tiny_gguf, tmp_path):
    (tmp_path / "mine").mkdir()
    status, said, torch_imported = models_add_in_a_fresh_process("mine", "--target", str(tiny_gguf), "--draft",
                                                                  "prompt-lookup", "--out", str(tmp_path))
    assert status == 2 and "already exists" in said and not torch_imported, said
    from viasd_adapt.tuning.onboard import AddRequest, check_request

    check_request(AddRequest(name="other", target=tiny_gguf, draft="prompt-lookup", root=tmp_path))  # control


def test_threads_beyond_the_bound_are_refused_and_above_the_cores_noted(char_pair):
    refused(invoke("generate", "--threads", "99999999999999999999", "--prompt", "x"), "--threads", "1<=x<=1024")
    refused(invoke("models", "build", "--threads", "0"), "--threads")
    cores = os.cpu_count() or 1
    args = ["generate", "--target", char_pair / "target", "--draft", char_pair / "draft", "--prompt", "def f",
            "--max-new-tokens", 1, "--no-color"]
    above = invoke(*args, "--threads", cores + 1)
    assert above.exit_code == 0 and f"--threads {cores + 1} is more than this machine's {cores} cores" in above.output
    within = invoke(*args, "--threads", 1)  # control: within the cores, no note
    assert within.exit_code == 0 and "more than this machine's" not in within.output


def test_a_tuned_choice_outside_the_known_ones_is_refused_naming_the_file(tuned_pair):
    from viasd_adapt.config.tuned import KNOWN_CHOICES, TunedSettings
    from viasd_adapt.tuning.grid import FAMILIES

    assert set(KNOWN_CHOICES) == set(FAMILIES) | {"ar"}
    path = tuned_pair / "tuned.json"
    data = json.loads(path.read_text())
    assert TunedSettings.load(path).choice in KNOWN_CHOICES  # control: as written, it loads
    data["choice"] = "turbo"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=rf"{path}: .*'choice' must be one of .*'turbo'"):
        TunedSettings.load(path)


# ----------------------------------------------------------------------------- the work folder's lock


def test_a_second_run_of_one_name_is_refused_while_the_first_holds_the_lock(tiny_gguf, tmp_path):
    from viasd_adapt.tuning.onboard import AddRequest

    request = AddRequest(name="mine", target=tiny_gguf, draft="prompt-lookup", root=tmp_path)
    with vio.hold_lock(request.lock, "`viasd models add mine`"):
        result = invoke("models", "add", "mine", "--target", tiny_gguf, "--draft", "prompt-lookup", "--out", tmp_path)
        refused(result, "`viasd models add mine` is running already", f"process {os.getpid()}", str(request.lock))
        with pytest.raises(ViasdError, match="running already"):
            with vio.hold_lock(request.lock, "`viasd models add mine`"):
                pass
    assert not request.lock.exists()
    with vio.hold_lock(request.lock, "`viasd models add mine`"):  # control: released, it is taken again
        assert request.lock.read_text().strip() == str(os.getpid())


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = tmp_path / ".mine.lock"
    lock.write_text(dead.stdout)  # what a killed run leaves: the file, its lock gone with its process
    with vio.hold_lock(lock, "`viasd models add mine`"):
        assert lock.read_text().strip() == str(os.getpid())


def test_a_lock_is_held_across_processes(tmp_path):
    """Another process holding the lock (flock is per open file, and dropped when its process ends)."""
    lock = tmp_path / ".mine.lock"
    ready = tmp_path / "ready"
    code = (f"import sys, pathlib\nfrom viasd_adapt.io import hold_lock\n"
            f"with hold_lock({str(lock)!r}, 'x'):\n    pathlib.Path({str(ready)!r}).write_text('1')\n    sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        while not ready.exists() and holder.poll() is None:  # an event: the holder says it holds it
            threading.Event().wait(0.02)
        assert holder.poll() is None
        with pytest.raises(ViasdError, match=f"x is running already \\(process {holder.pid}"):
            with vio.hold_lock(lock, "x"):
                pass
    finally:
        holder.communicate(b"")
    with vio.hold_lock(lock, "x"):  # control: its process ended, the lock is free
        pass
