"""The paper's Delta rule, as advice: a mask whose Delta(u) < 0 should not serve a lossy tier.

The paper drops the slim verifier when ``Delta(u) = C(q||p) - [C(u||p) + C(q||u)] < 0``: the routed
path p -> u -> q is then costlier, under its own cost, than letting q check p directly. ``viasd
search`` prints :func:`delta_message`; opening a lossy tier on such a mask warns with
:class:`NegativeDeltaWarning`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from viasd_adapt.core.notices import Notice, emit
from viasd_adapt.core.settings import TierSettings


class NegativeDeltaWarning(UserWarning):
    """The routing mask's Delta(u) < 0: by the paper's rule this slim verifier should be dropped."""


def delta_message(delta: float | None, search: Any = None) -> str | None:
    """A sentence explaining a negative Delta, or None when Delta is unknown or >= 0. ``search``: the
    mask's search section (a :class:`~viasd_adapt.config.search_record.SearchRecord`, or its JSON
    object), which names the tolerances the Delta was measured at."""
    if delta is None or delta >= 0:
        return None
    read = search.get if isinstance(search, Mapping) else lambda name: getattr(search, name, None)
    alpha1, alpha2 = read("alpha1"), read("alpha2")
    at = ""
    if alpha1 is not None and alpha2 is not None:
        at = f" at alpha1/alpha2 = {alpha1}/{alpha2}"
    return (
        f"Delta(u) = {delta:.1f} < 0{at}: the routed path p -> u -> q costs more than q checking p directly "
        "(VIA-SD drops the slim verifier here). Expect lossy VIA-SD to lose to the lenient baseline at equal fidelity; "
        "run `viasd tune` to measure which wins on this pair, or use mode lenient or none."
    )


def negative_delta_notice(artifact: Any, settings: TierSettings) -> Notice | None:
    """The advice for a lossy/audit tier opened with a mask artifact whose Delta < 0, as a notice
    to give (:func:`viasd_adapt.core.notices.emit`); None otherwise.

    Takes the artifact already read (a :class:`~viasd_adapt.config.mask.MaskArtifact`), never a
    path: a run reads each mask file once (:func:`viasd_adapt.engine.context.open_context`).
    Anything else (a bare routing mask, None) records no Delta and gets no advice."""
    from viasd_adapt.config.mask import MaskArtifact

    if settings.mode.value not in ("lossy", "audit") or not isinstance(artifact, MaskArtifact):
        return None
    message = delta_message(artifact.delta, artifact.search)
    return Notice(NegativeDeltaWarning, f"viasd-adapt: {message}") if message else None


def warn_if_negative_delta(artifact: Any, settings: TierSettings) -> str | None:
    """Gives :func:`negative_delta_notice` as a warning; returns its sentence (None: nothing to say)."""
    notice = negative_delta_notice(artifact, settings)
    if notice is None:
        return None
    emit([notice])
    return notice.message[len("viasd-adapt: "):]


__all__ = ["NegativeDeltaWarning", "delta_message", "negative_delta_notice", "warn_if_negative_delta"]
