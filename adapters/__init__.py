"""Framework adapters, installed as ``viasd_adapt.adapters`` (one module or package per framework).

The folder is mapped to ``viasd_adapt.adapters`` in pyproject.toml so that it never clashes with the
unrelated PyPI package called ``adapters``.
"""
