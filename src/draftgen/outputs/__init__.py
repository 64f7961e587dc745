"""Outputs: what a run gives its users. Training files (``export``), the vocabulary a drafter
needs (``vocab``) and the HTML report (``report``).
"""
