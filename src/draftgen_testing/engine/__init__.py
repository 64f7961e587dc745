"""A real vLLM engine for the tests: its environment, a tiny Qwen3 model, the server and a proxy.

Test scaffolding beside the product (``pytest -m engine``, docs/verification.md); nothing in
``draftgen`` imports it, and draftgen's own environment never needs torch: the engine's
environment is a virtualenv of its own (``env``), and the model is built by its python (``model``).
"""
