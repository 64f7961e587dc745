"""The live engine's parts, one job each, held by ``generate.engine.LiveGeneration``: ``rows``
(admission, the producer), ``chains`` (the workers), ``requests`` (a request made and paid for),
``providers`` (calibration and judging), ``rebuys`` (spoiled samples bought again), ``stopping``
(a stop, a halt, the signals). Answers refused for their usage are ``generate.refusals``'.
"""
