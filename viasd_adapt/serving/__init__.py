"""Serving engines: what the slim tier and the tuned rule become inside a batching server (vLLM).

Kept free of heavy imports: :mod:`viasd_adapt.serving.batch` is plain arithmetic, and
:mod:`viasd_adapt.serving.vllm_plugin` is loaded by vLLM in every engine process (through the
``vllm.general_plugins`` entry point), so importing it must cost nothing when no engine asked for it.
See ``docs/serving.md``.
"""
