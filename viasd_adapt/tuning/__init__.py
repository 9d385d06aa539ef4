"""``viasd tune``: the cheapest setting that meets a fidelity budget, written as ``tuned.json``.

The artifact is :class:`viasd_adapt.config.tuned.TunedSettings`; runs resolve their settings from
it with :func:`viasd_adapt.config.resolve.resolve_settings`.
"""
