"""Framework adapters, installed as ``viasd_adapt.adapters`` (one module or package per framework).

The folder is linked into the package as ``viasd_adapt/adapters`` (a symlink), so it is installed and
imported only as ``viasd_adapt.adapters``, never as a top-level ``adapters`` that would clash with
the unrelated PyPI package of that name, and editors and type checkers resolve the same path.
"""
