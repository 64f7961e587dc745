"""The run's orchestration: options checked, the probe, the pipeline (ingest -> plan -> generate ->
store -> reconstruct -> verify), estimate, cancel and the Ray executor. The engines that send the
requests live in ``draftgen.generate``."""
