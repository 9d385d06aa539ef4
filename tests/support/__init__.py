"""Helpers shared by the test modules: model pairs (pairs, seq2seq, eagle), statistics (stats) and
the per-framework drivers of the conformance suite (frameworks). Fixtures live in conftest.py files;
no test module imports from another test module."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # benchmarks/ and examples/ live here
