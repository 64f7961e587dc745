"""Reconstruction: stored completions back to the exact token ids the model generated (``text``,
``batch``), and the proof of each sample against the provider's counts (``verify``).
"""
