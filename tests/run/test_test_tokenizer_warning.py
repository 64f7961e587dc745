"""A fixture tokenizer (draftgen init's example) sent to a server off this machine is warned of."""

from __future__ import annotations

import logging

from draftgen.generate.endpoints import EndpointSpec
from draftgen.run.pipeline import _warn_of_a_test_tokenizer


def spec(url: str) -> EndpointSpec:
    return EndpointSpec(url=url)


def test_a_fixture_tokenizer_against_a_remote_server_is_warned_of(caplog):
    with caplog.at_level(logging.WARNING, logger="draftgen.run"):
        _warn_of_a_test_tokenizer("fixture:kimi-k2.5", [spec("https://openrouter.ai/api/v1/")])
    assert caplog.messages == [
        "the tokenizer fixture:kimi-k2.5 is a test fixture, not the model's own, and "
        "https://openrouter.ai/api/v1 is not this machine: set tokenizer to the model's hub id "
        "or a downloaded copy (draftgen.toml's tokenizer, or --tokenizer) so the samples are "
        "the model's ids"
    ]


def test_a_fixture_on_loopback_or_a_real_tokenizer_anywhere_is_not(caplog):
    with caplog.at_level(logging.WARNING, logger="draftgen.run"):
        _warn_of_a_test_tokenizer("fixture:qwen3", [spec("http://127.0.0.1:8000/v1")])
        _warn_of_a_test_tokenizer("fixture:qwen3", [spec("http://localhost:8000/v1")])
        _warn_of_a_test_tokenizer("moonshotai/Kimi-K2.5", [spec("https://openrouter.ai/api/v1")])
    assert caplog.messages == []
