"""Atomic writes: a failed or interrupted write never replaces a good artifact with a broken one."""

from __future__ import annotations

import os
import stat

import pytest

from viasd_adapt.errors import ViasdError
from viasd_adapt.io import read_text, write_atomic, write_directory, write_json, write_text


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_failed_file_write_keeps_the_old_file_and_leaves_nothing(tmp_path):
    path = write_json(tmp_path / "mask.json", {"good": True})

    def dies_halfway(tmp):
        tmp.write_text('{"trunc')
        raise OSError(28, "No space left on device")

    with pytest.raises(ViasdError, match="cannot write mask .*No space left"):
        write_atomic(path, dies_halfway, "mask")
    assert read_text(path) == '{\n  "good": true\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mask.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()


def test_interrupt_during_write_keeps_the_old_file(tmp_path):
    path = write_text(tmp_path / "out.json", "old")

    def interrupted(tmp):
        tmp.write_text("ne")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, interrupted)
    assert path.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


def test_write_onto_a_directory_or_into_a_file_is_a_clear_error(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(ViasdError, match="is a directory"):
        write_text(tmp_path / "d", "x")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ViasdError, match="cannot write"):
        write_text(tmp_path / "f" / "child.json", "x")


def test_directory_written_whole_or_not_at_all(tmp_path):
    target = tmp_path / "eagle_head"

    def good(version):
        def write(directory):
            (directory / "config.json").write_text(version)
            (directory / "pytorch_model.bin").write_bytes(version.encode())
        return write

    write_directory(target, good("v1"))
    assert stat.S_IMODE(target.stat().st_mode) == 0o777 & ~_umask()

    def fails_after_one_file(directory):
        (directory / "config.json").write_text("v2")
        raise OSError(5, "Input/output error")

    with pytest.raises(ViasdError, match="Input/output error"):
        write_directory(target, fails_after_one_file)
    assert (target / "config.json").read_text() == "v1" and (target / "pytorch_model.bin").read_bytes() == b"v1"
    write_directory(target, good("v2"))
    assert (target / "config.json").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eagle_head"]  # no temporary or old copies left
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ViasdError, match="not a directory"):
        write_directory(tmp_path / "afile", good("v3"))


def test_save_figure_keeps_the_format_of_the_suffix(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from viasd_adapt.io import save_figure

    fig = plt.figure()
    try:
        assert save_figure(fig, tmp_path / "plot.svg").read_text().lstrip().startswith("<?xml")
        assert save_figure(fig, tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
    finally:
        plt.close(fig)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png", "plot.svg"]


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_what_a_writer_leaves_private_follows_the_umask(tmp_path, umask):
    """A writer that makes its files 0600 and a folder 0700 (safetensors, mkdtemp) leaves, once
    write_directory has put them in place, the umask's modes; 0o077 is the control that the modes
    come from the umask."""

    def private(folder):
        os.close(os.open(folder / "weights.safetensors", os.O_WRONLY | os.O_CREAT, 0o600))
        (folder / "nested").mkdir(mode=0o700)
        os.close(os.open(folder / "nested" / "tokenizer.json", os.O_WRONLY | os.O_CREAT, 0o600))
        assert stat.S_IMODE((folder / "weights.safetensors").stat().st_mode) == 0o600  # as the writer left it

    previous = os.umask(umask)
    try:
        folder = write_directory(tmp_path / "entry", private)
        single = write_atomic(tmp_path / "one.pt", lambda tmp: os.chmod(tmp, 0o600))
    finally:
        os.umask(previous)
    for entry in (folder, folder / "nested"):
        assert stat.S_IMODE(entry.stat().st_mode) == 0o777 & ~umask
    for entry in (folder / "weights.safetensors", folder / "nested" / "tokenizer.json", single):
        assert stat.S_IMODE(entry.stat().st_mode) == 0o666 & ~umask
