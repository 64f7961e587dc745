"""Generation: the plan's turns sent to a server and stored. The run (``pipeline``), the live
engine (``engine``), the HTTP client, endpoints, budget, progress, the resume index (``resume``)
and batch mode (``batch``).
"""
