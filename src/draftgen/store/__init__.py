"""The store: one SQLite file per run holding every request and completion (``database``, the
``Store`` front over one module per thing kept), and merging the stores of shards run apart
(``merge``). It knows rows, not providers or models.
"""
