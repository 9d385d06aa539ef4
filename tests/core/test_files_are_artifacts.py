"""Every file the project reads or writes goes through a typed artifact (or the one JSON reader and
writer), never through ``json`` called on the spot.

Read off the source with :mod:`ast`: a call of ``json.load``, ``json.loads``, ``json.dump`` or
``json.dumps`` (``json`` under any name it was imported as, or the functions imported from it) is
allowed in ``viasd_adapt/config/`` (the artifacts and :func:`~viasd_adapt.config.schema.read_json`)
and ``viasd_adapt/io.py`` (the atomic writer, the JSON text of a command's output, the text a cache
key digests), and in the few modules that read a format the project does not own
(:data:`OUTSIDE_FORMATS`, each with the format it reads). The library, the adapters and the
benchmarks are checked. A control feeds the checker snippets that call ``json`` each way.
"""

from __future__ import annotations

import ast

import pytest

from tests.support import REPO_ROOT

CHECKED = ("viasd_adapt", "adapters", "benchmarks")
ALLOWED_PLACES = ("viasd_adapt/config/", "viasd_adapt/io.py")
#: module -> the outside format it reads or writes as it is
OUTSIDE_FORMATS = {
    "viasd_adapt/prompts/files.py": "prompt files, the user's JSON and JSON lines",
    "viasd_adapt/prompts/spec_bench.py": "Spec-Bench's question.jsonl",
    "viasd_adapt/training/eagle_head.py": "an EAGLE head's config.json (eagle-llm's format)",
    "viasd_adapt/training/eagle_distill.py": "an EAGLE head's config.json (eagle-llm's format)",
    "viasd_adapt/models/eagle_head_files.py": "an EAGLE head's config.json (eagle-llm's format)",
    "adapters/eagle/compat.py": "a base model's HF config.json and its EAGLE head's config.json",
    "viasd_adapt/models/placement.py": "a model folder's HF config.json (the dtype it is stored in)",
}
JSON_FUNCTIONS = {"load", "loads", "dump", "dumps"}


def raw_json_calls(source: str) -> list[str]:
    """The ``json.load/loads/dump/dumps`` calls in ``source``, however ``json`` was imported."""
    tree = ast.parse(source)
    module_names, function_names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            module_names |= {alias.asname or alias.name for alias in node.names if alias.name == "json"}
        elif isinstance(node, ast.ImportFrom) and node.module == "json":
            function_names |= {alias.asname or alias.name for alias in node.names if alias.name in JSON_FUNCTIONS}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr in JSON_FUNCTIONS and isinstance(func.value, ast.Name)
                and func.value.id in module_names) or (isinstance(func, ast.Name) and func.id in function_names):
            found.append(f"line {node.lineno}: {ast.unparse(func)}")
    return found


def offenders() -> dict[str, list[str]]:
    files = sorted(path for folder in CHECKED for path in (REPO_ROOT / folder).rglob("*.py"))
    assert len(files) > 150  # the walk found the library and the benchmarks
    found = {}
    for path in files:
        name = str(path.relative_to(REPO_ROOT))
        if name.startswith(ALLOWED_PLACES) or name in OUTSIDE_FORMATS:
            continue
        calls = raw_json_calls(path.read_text(encoding="utf-8"))
        if calls:
            found[name] = calls
    return found


def test_no_file_is_read_or_written_as_raw_json_outside_the_artifacts():
    assert offenders() == {}, "read or write it through a typed artifact (viasd_adapt/config/) or viasd_adapt.io"


@pytest.mark.parametrize("path", sorted(OUTSIDE_FORMATS))
def test_each_outside_format_module_still_needs_its_place(path):
    """An entry of the list that no longer calls ``json`` is stale: the list stays short and true."""
    assert raw_json_calls((REPO_ROOT / path).read_text(encoding="utf-8"))


@pytest.mark.parametrize("snippet", [
    "import json\ndata = json.loads(open('report.json').read())\n",
    "import json as _json\ndef save(path, data):\n    path.write_text(_json.dumps(data))\n",
    "from json import load\nwith open('tuned.json') as f:\n    tuned = load(f)\n",
    "def lazy(handle, data):\n    import json\n    json.dump(data, handle)\n",
])
def test_the_checker_finds_raw_json_however_it_is_imported(snippet):
    assert raw_json_calls(snippet)


def test_the_checker_passes_artifacts_and_other_json_names():
    snippet = ("from viasd_adapt.config.schema import read_json\n"
               "from viasd_adapt.io import write_json\n"
               "data = read_json('x.json', 'report')\n"
               "write_json('y.json', data)\n"
               "report.to_json(); args.json.exists(); orjson = None\n")
    assert raw_json_calls(snippet) == []
