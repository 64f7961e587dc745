"""draftgen's test scaffolding, shipped beside it and imported by nothing in it: offline tokenizers
(``fixture:NAME``, ``fixtures``), the files they are built from, and failpoints for crash tests.
"""
