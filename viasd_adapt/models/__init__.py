"""Self-trained model pairs (target + drafter) on standard-library code.

Submodules: ``corpus`` (the data and its held-out split), ``tokenizer``, ``presets`` (sizes),
``layer_skip`` (identity pass-through of decoder layers), ``train``, ``evaluate``, ``build``
(the ``viasd models build`` pipeline) and ``registry`` (where built and shipped pairs live).
Nothing heavy is imported here, so ``import viasd_adapt.models.registry`` stays cheap.
"""
