"""The store: one SQLite file per run (``database.Store``, a holder of parts over one connection)
and the merge of shards run apart (``merge``): a run's rows and what was judged of them and of its
providers (figures, exclusions, calibrations), never how to reach a provider or render for a model.
"""
