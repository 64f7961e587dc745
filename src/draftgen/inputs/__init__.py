"""Inputs: rows in, turns out. Reading datasets (``ingest``), mixing them (``mix``), planning
the turns to generate (``plan``), admitting rows and counting the plan (``admission``) and
splitting a plan over machines (``shard``).
"""
