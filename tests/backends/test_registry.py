"""The backend registry: each backend declares everything about itself in one place, and the probe,
the simulator and batch mode read it from there by key."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from draftgen.backends import (
    BACKEND_NAMES,
    Backend,
    UnknownBackendError,
    all_backends,
    config_tables,
    get_backend,
    openrouter,
    probe_of,
    server_families,
    sglang,
    sglang_generate,
    vllm,
)
from draftgen.generate.batch import dialects as batch_dialects
from draftgen.run.probe import PROBE_CHECKS
from draftgen.simulator import config as simulator_config

BACKENDS_DIR = Path(__file__).resolve().parents[2] / "src" / "draftgen" / "backends"


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_every_backend_declares_each_piece(name):
    backend = get_backend(name)
    assert isinstance(backend, Backend) and backend.name == name
    assert callable(backend.request_body) and callable(backend.parse_completion)
    assert callable(backend.stream_accumulator) and callable(backend.settings)
    assert backend.id_source in ("text", "ids")
    # Keys the layers above define on their own: each must know what the backend names.
    assert backend.probe in PROBE_CHECKS  # the probe knows its checks
    assert set(backend.batch_dialects) <= set(batch_dialects.DIALECTS)  # a class speaks each
    assert backend.help
    table = backend.config_table
    assert table is None or (table.keys and set(table.options) and callable(table.read))


def test_the_registry_as_the_layers_above_read_it():
    # Each name gives its own module's declaration, in the order the CLI lists them.
    modules = (openrouter, vllm, sglang, sglang_generate)
    assert BACKEND_NAMES == ("openrouter", "vllm", "sglang", "sglang-generate")
    assert all(a is b.BACKEND for a, b in zip(all_backends(), modules, strict=True))
    with pytest.raises(UnknownBackendError, match="unknown backend 'tgi': use one of openrouter"):
        get_backend("tgi")
    # sglang-generate speaks to an SGLang server: three families for four backends.
    assert server_families() == ("openrouter", "vllm", "sglang")
    assert simulator_config.DIALECTS == ("openrouter", "vllm", "sglang")
    assert simulator_config.BATCH_DIALECTS == ("openrouter", "openai-files")
    assert batch_dialects.DIALECT_NAMES == ("openrouter", "openai-files")
    assert set(batch_dialects.DIALECTS) == set(batch_dialects.DIALECT_NAMES)
    assert [b.batch_api for b in all_backends()] == [True, False, False, False]
    assert [b.id_source for b in all_backends()] == ["text", "ids", "ids", "ids"]
    assert list(config_tables()) == ["openrouter"]
    assert config_tables()["openrouter"].options == ("provider",)


def test_the_probe_asks_what_the_backends_of_a_family_declare():
    declared = {backend.dialect: backend.probe for backend in all_backends()}
    # The backends of one server family agree (sglang and sglang-generate).
    for backend in all_backends():
        assert probe_of(backend.dialect) == declared[backend.dialect] == backend.probe
    assert declared == {"openrouter": "openrouter", "vllm": "listed-models", "sglang": "reachable"}
    assert probe_of("some-other-server") == "reachable"
    assert set(PROBE_CHECKS) == {*declared.values()}  # no check that no backend names


def test_backend_modules_share_code_through_base_only():
    """A backend module imports the package and ``base``, never another backend's module."""
    siblings = {path.stem for path in BACKENDS_DIR.glob("*.py")} - {"__init__", "base"}
    for path in BACKENDS_DIR.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "draftgen.backends."
            ):
                module = node.module.rpartition(".")[2]
                assert module not in siblings or path.stem == "__init__", (path.name, module)
