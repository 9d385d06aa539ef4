"""``viasd tune``: the cheapest setting that meets a fidelity budget, written as ``tuned.json``.

The artifact is :class:`viasd_adapt.config.tuned.TunedSettings`; runs resolve their settings from
it with :func:`viasd_adapt.config.resolve.resolve_settings`.
"""


def __getattr__(name: str):
    """Names this package handed out in 0.2.0 that moved (:mod:`viasd_adapt.deprecated`)."""
    from viasd_adapt.deprecated import moved_name

    return moved_name(__name__, name)
