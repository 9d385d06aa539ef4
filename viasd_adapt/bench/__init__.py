"""``viasd bench``: every framework with and without the tier, in one process.

Modules, one job each:

* :mod:`~viasd_adapt.bench.context`: load a model pair from local paths, the mask (or a labelled
  fallback), the prompts;
* :mod:`~viasd_adapt.bench.rows`: the registry of row runners, one entry per framework;
* :mod:`~viasd_adapt.bench.measure`: forward passes and tensor memory, counted with hooks;
* :mod:`~viasd_adapt.bench.costs`: per-forward costs and the analytic speedup bound;
* :mod:`~viasd_adapt.bench.run`: the interleaved, repeated schedule and the medians;
* :mod:`~viasd_adapt.bench.goals`, :mod:`~viasd_adapt.bench.report`, :mod:`~viasd_adapt.bench.plot`:
  goal checks, table/JSON, PNG;
* :mod:`~viasd_adapt.bench.demo`: ``viasd demo`` (tier-coloured completions and a small bench).
"""
