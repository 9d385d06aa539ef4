"""A first run without a mask: untiered, with one line on how to get a mask for this target.

A user's own target has no ``mask.json`` and no ``tuned.json`` until ``viasd models add`` (or
``viasd search`` and ``viasd tune``) makes them, and the default mode, lossy, needs a mask. So
when the mode was not asked for (it came from the defaults), a run with no mask runs untiered SD
(mode ``none``, exactly the target's output) instead of stopping, and says how to get the tier
for this target and about how long that takes. A mode asked for by flag or preset that needs a
mask still fails by name: the user asked for the tier.
"""

from __future__ import annotations

from pathlib import Path

# the rule itself is the planner's (the one set-up of a run); its source shows in --explain
from viasd_adapt.frameworks.planning import NO_MASK_SOURCE, without_mask


def how_to_get_a_mask(target: Path | str | None, draft: Path | str | None) -> str:
    """The one line: the command that makes a mask and a tuned setting for this pair, and its time."""
    from viasd_adapt.tuning.onboard import DEFAULT_MINUTES

    name = Path(str(target)).stem.split(".")[0] if target else "mine"
    draft_word = draft if draft else "prompt-lookup"
    return (f"no mask for this target, so this runs untiered SD (mode none, the target's own output); for the tier, "
            f"`viasd models add {name} --target {target} --draft {draft_word}` searches a mask and tunes it (about "
            f"{DEFAULT_MINUTES:g} min here, its default --minutes budget), then use --pair {name}")


__all__ = ["NO_MASK_SOURCE", "how_to_get_a_mask", "without_mask"]
