"""``viasd tune``: the fastest setting that meets a fidelity budget, and the artifact that records it."""
