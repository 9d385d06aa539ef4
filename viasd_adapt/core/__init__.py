"""The tier core: the verification math and the verify step, with no model, no file and no CLI.

Settings (:mod:`.settings`), the acceptance rules and their hooks (:mod:`.rules`, :mod:`.hooks`),
the per-stage decisions (:mod:`.tiers`), one cycle's decision (:mod:`.cycle`), the verify step every
framework calls per cycle (:mod:`.verify_step`), its ledger and metrics, the drafter-quality
monitor, the KL-style cost (:mod:`.cost`) and sampling. Nothing is imported here, so that
``viasd_adapt.core.settings`` stays importable without torch.
"""
