"""The registries a setting's choices come from (profiles, backends, export formats, the
simulator's declarations), read when a parser or a check needs them, so reading the options
loads none of them.
"""

from __future__ import annotations

# -- the registries the choices come from, read when a parser or a check needs them -------------


def profile_names() -> list[str]:
    """Every profile and alias, then ``generic`` (the layout derived from the chat template)."""
    from draftgen.profiles import PROFILE_NAMES

    return list(PROFILE_NAMES)


def backend_names() -> tuple[str, ...]:
    from draftgen.backends import BACKEND_NAMES

    return BACKEND_NAMES


def reasoning_efforts() -> tuple[str, ...]:
    from draftgen.backends.openrouter import REASONING_EFFORTS

    return REASONING_EFFORTS


def input_formats() -> tuple[str, ...]:
    from draftgen.inputs.ingest import INPUT_FORMATS

    return INPUT_FORMATS


def batch_dialects() -> tuple[str, ...]:
    from draftgen.generate.batch.dialects import DIALECT_NAMES

    return DIALECT_NAMES


def export_formats() -> tuple[str, ...]:
    from draftgen.outputs.export import FORMATS

    return FORMATS


def vocab_trainers() -> tuple[str, ...]:
    """The trainers ``draftgen vocab --for`` writes files for."""
    from draftgen.outputs import VOCAB_TRAINERS

    return VOCAB_TRAINERS


def simulator_dialects() -> tuple[str, ...]:
    from draftgen.simulator.config import DIALECTS

    return DIALECTS


def simulator_settings() -> tuple:
    """The settings ``draftgen simulate`` takes, declared by the simulator on ``SimConfig``'s
    fields with the run's own ``Setting``."""
    from draftgen.declaration import settings_of
    from draftgen.simulator.config import SimConfig

    return settings_of(SimConfig)


def simulator_hostile_kinds() -> tuple[str, ...]:
    from draftgen.simulator.config import HOSTILE

    return HOSTILE


def config_tables() -> dict:
    """The draftgen.toml tables the backends own (``[openrouter]``), by name."""
    from draftgen.backends import config_tables as tables

    return tables()
