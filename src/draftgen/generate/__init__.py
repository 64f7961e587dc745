"""Generation engines: the plan's turns sent to a server and stored. The live engine (``engine``,
its parts in ``live``) with its HTTP client, endpoints, budget, progress and resume index, and
batch mode (``batch``),
both keeping one contract (``contract.Engine``) and one signal handler (``signals``). The run
that drives them is ``draftgen.run``.
"""
