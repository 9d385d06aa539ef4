"""Training pairs: what ``viasd models build`` and the benchmarks need, and no run does.

The stdlib pairs trained from scratch: the corpus and its held-out split (``corpus``), the
tokenizer (``tokenizer``), sizes and budgets (``presets``), decoder layers skipped by identity
(``layer_skip``), the training loop (``train``), the build report's measurements (``evaluate``) and
the ``viasd models build --recipe`` pipeline (``build``). Drafters and EAGLE heads distilled for a
real target: the target's answers (``distill_data``), the drafter (``drafter_distill``), the head
(``eagle_head``, ``eagle_distill``) and their pipeline (``distill_build``). What a run reads of
their output (pairs, shared drafters, heads) is :mod:`viasd_adapt.models`'; this room writes it.
Nothing heavy is imported here.
"""
