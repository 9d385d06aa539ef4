"""Loading model pairs: what every run needs before its first token.

Where pairs live and how a name finds one (``registry``), loading one model or tokenizer from a
folder, a GGUF file or a hub id (``loading``, ``gguf``, ``placement`` for ``--device``, ``--dtype``
and ``--device-map``), a drafter stored without the target's embedding (``shared_drafter``), an
EAGLE head as a run reads it (``eagle_head_files``, and ``eagle_compat`` for eagle-llm on
transformers 5), the loaded pair itself (``pair``) and the tiny random models of the tests
(``tiny``, ``tiny_seq2seq``). Training pairs is :mod:`viasd_adapt.training`'s job; this room never
imports it, so a run loads no training code. Nothing heavy is imported here, so
``import viasd_adapt.models.registry`` stays cheap.
"""
