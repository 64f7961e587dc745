"""Outputs: what a run gives its users. Training files (``export``), the vocabulary a drafter
needs (``vocab``) and the HTML report (``report``).
"""

# The trainers whose own files draftgen writes (``export --format``, ``vocab --for``).
VOCAB_TRAINERS = ("specforge", "speculators")
DRAFT_VOCAB_SIZE = 32000  # SpecForge's default draft vocabulary; the speculators export's too
