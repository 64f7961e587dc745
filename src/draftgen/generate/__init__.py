"""Generation engines: the plan's turns sent to a server and stored. The live engine (``engine``)
with its HTTP client, endpoints, budget, progress and resume index, and batch mode (``batch``).
The run that drives them is ``draftgen.run``.
"""
