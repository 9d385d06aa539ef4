"""``viasd bench``: every framework with and without the tier, and the simple baselines, in one process.

Modules, one job each (frameworks and model loading live in :mod:`viasd_adapt.frameworks` and
:mod:`viasd_adapt.models.pair`, shared with ``viasd generate`` and ``viasd tune``):

* :mod:`~viasd_adapt.bench.run`: the rows, the interleaved and repeated schedule, the medians;
* :mod:`~viasd_adapt.bench.costs`: per-forward costs, full-equivalent passes, the analytic bound;
* :mod:`~viasd_adapt.bench.fidelity`: target likelihood, regret, agreement, the next-line task;
* :mod:`~viasd_adapt.bench.measure`: passes of rows without metrics, and tensor memory (hooks);
* :mod:`~viasd_adapt.bench.report`: tables, JSON, the plot;
* :mod:`~viasd_adapt.bench.session`: one invocation end to end, from its one config
  (``BenchConfig``, shared by bench and demo);
* :mod:`~viasd_adapt.bench.demo`: ``viasd demo``.

The project's speed targets are not here: ``benchmarks/goals.py`` checks a bench JSON against them.
"""
