"""Where batches go (issue #27): one endpoint gives the same batch URL whichever way it was given
(``--base-url``, ``[[backend.endpoints]]``, the built-in simulator), and several are refused
before anything is made, with one sentence saying to pass ``--batch-url``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import draftgen

from draftgen.generate.batch.errors import BatchRunError
from draftgen.generate.batch.generate import batch_url
from draftgen.generate.endpoints import EndpointSpec, endpoint_specs

ROOT = "http://127.0.0.1:18993/api/v1"


def options(dialect: str, url: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(batch_dialect=dialect, batch_url=url)


@pytest.mark.parametrize(
    "given",
    [
        ROOT,  # the built-in simulator's URL
        endpoint_specs(ROOT),  # one --base-url, as the run checks it
        endpoint_specs(ROOT + "/"),
        [EndpointSpec(ROOT, concurrency=4)],  # one [[backend.endpoints]]
    ],
)
def test_one_endpoint_gives_one_batch_url_whichever_way_it_was_given(given):
    # OpenAI-style file batches are served at the /v1 beside /api/v1.
    assert batch_url(options("openai-files"), given) == "http://127.0.0.1:18993/v1"
    assert batch_url(options("openrouter"), given) == ROOT
    named = options("openai-files", "https://api.moonshot.ai/v1/")
    assert batch_url(named, given) == "https://api.moonshot.ai/v1"


def test_several_endpoints_need_a_batch_url():
    several = endpoint_specs([ROOT, "http://localhost:18993/api/v1"])
    with pytest.raises(BatchRunError) as refused:
        batch_url(options("openai-files"), several)
    assert str(refused.value) == (
        "--batch sends every batch to one API, and 2 endpoints are given; name it with "
        "--batch-url (batch_url in draftgen.toml), or give one endpoint"
    )
    assert batch_url(options("openai-files", ROOT), several) == ROOT


def test_several_endpoints_are_refused_before_the_run_makes_anything(tmp_path):
    config = tmp_path / "draftgen.toml"
    config.write_text(
        f'[[backend.endpoints]]\nurl = "{ROOT}"\n\n'
        '[[backend.endpoints]]\nurl = "http://localhost:18993/api/v1"\n'
    )
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    out = tmp_path / "run"
    result = draftgen(
        "run",
        "--config",
        str(config),
        "--batch",
        "--batch-dialect",
        "openai-files",
        "--input",
        str(prompts),
        "--model",
        "test/model",
        "--tokenizer",
        "fixture:kimi-k2.5",
        "--out",
        str(out),
        "--api-key-env",
        "DRAFTGEN_TEST_KEY",
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "draftgen: --batch sends every batch to one API, and 2 endpoints are given; name it with "
        "--batch-url (batch_url in draftgen.toml), or give one endpoint"
    )
    assert not out.exists()
