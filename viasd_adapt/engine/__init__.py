"""The decoding engine: drafters, the decoder-only verifier seam, the draft -> verify loop, the
encoder-decoder loop and the set-up every adapter opens a tier with (:mod:`.context`)."""


def __getattr__(name: str):
    """Names this package handed out in 0.2.0 that moved (:mod:`viasd_adapt.deprecated`)."""
    from viasd_adapt.deprecated import moved_name

    return moved_name(__name__, name)
