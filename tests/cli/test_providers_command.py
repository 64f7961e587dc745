"""``draftgen providers``: its options are the declarations, its errors one sentence and exit 2,
a listed name cannot drive the terminal, and ``--probe`` prints the routing block to use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from listing_server import ListingServer

from draftgen.cli import main as cli
from draftgen.cli.parser import build_parser, global_dests, subparsers
from draftgen.options import every_setting
from draftgen.simulator import wire

TOKENIZER = "fixture:kimi-k2.5"
MODEL = "moonshotai/kimi-k2.5"
PATH = "/api/v1/models/moonshotai/kimi-k2.5/endpoints"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def providers(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["providers", MODEL, "--no-config", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_parser_is_the_declarations():
    parser = subparsers(build_parser())["providers"]
    own = {"help", *global_dests()}  # options every command takes
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest not in own}
    declared = {s.key: s for s in every_setting() if "providers" in s.commands and s.flag}
    assert set(actions) == set(declared)
    for key, item in declared.items():
        assert item.flag in actions[key].option_strings
        assert actions[key].help == item.help_text()
    assert {"probe", "probe_out", "providers_json", "tokenizer", "input"} <= set(declared)


def test_the_docs_show_the_command_and_every_flag():
    reference = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert "## `draftgen providers`" in reference
    guide = (DOCS / "providers.md").read_text(encoding="utf-8")
    for item in every_setting():
        if item.group == "providers":
            assert item.flag in guide


def test_a_listing_with_hostile_names_is_printed_defused(capsys):
    body = {
        "data": {
            "id": MODEL,
            "endpoints": [
                {
                    "provider_name": "Evil\x1b[2J\x1b]0;owned\x07",
                    "tag": "evil",
                    "pricing": {"prompt": "0.0000004", "completion": "not a price"},
                    "context_length": "131072",
                    "quantization": "fp8",
                    "status": 0,
                }
            ],
        }
    }
    with ListingServer() as server:
        server.routes[PATH] = (200, "application/json", json.dumps(body).encode())
        code, out, err = providers(capsys, "--base-url", server.base_url)
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out
        assert "Evil\\x1b[2J\\x1b]0;owned\\x07" in out
        assert "$0.4/?" in out  # a price that is not a number is "?"
        line = out.splitlines()[-1].split()
        # Context "131072" (a string) is "?"; status 0 is OpenRouter's "up" (shown as a bare
        # "0" before, issue #35).
        assert line[-4:] == ["$0.4/?", "fp8", "?", "up"]
        code, out, _ = providers(capsys, "--base-url", server.base_url, "--json")
        assert code == 0 and json.loads(out)[0]["provider"] == "Evil\x1b[2J\x1b]0;owned\x07"


def test_a_listed_status_is_shown_in_words():
    from draftgen.cli.present import endpoint_status

    shown = [endpoint_status(v) for v in (0, 3, -1, None, "online", "\x1b[2J")]
    assert shown == ["up", "up", "degraded (-1)", "?", "online", "\\x1b[2J"]


def test_listing_errors_are_one_sentence_and_exit_2(capsys):
    with ListingServer() as server:
        server.routes[PATH] = (200, "text/html", b"<html>sign in</html>")
        cases = {
            (server.base_url,): "did not return a model's endpoint listing",
            (server.base_url.replace("/api/v1", "/none/v1"),): "answered 404",
            ("http://127.0.0.1:9/api/v1",): "failed (ClientConnectorError)",
        }
        for (url,), sentence in cases.items():
            code, out, err = providers(capsys, "--base-url", url)
            assert code == 2 and out == ""
            assert sentence in err and len(err.splitlines()) == 1, err
            assert err.startswith("draftgen: ")


@pytest.mark.parametrize(
    ("argv", "sentence"),
    [
        (["--simulate"], "--simulate needs --tokenizer"),
        (["--simulate", "--base-url", "https://x.example/api/v1"], "drop one of them"),
        (["--base-url", "http://10.1.2.3/api/v1"], "sends the API key unencrypted"),
        (["--probe", "1", "--simulate"], "--probe needs --tokenizer"),
    ],
)
def test_usage_errors_are_one_sentence_and_exit_2(capsys, argv, sentence):
    code, out, err = providers(capsys, *argv)
    assert code == 2 and out == ""
    assert sentence in err and len(err.splitlines()) == 1, err


def test_probe_zero_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["providers", MODEL, "--probe", "0"])
    assert exit_.value.code == 2
    assert "0 is not a positive integer" in capsys.readouterr().err


def test_the_probe_prints_the_block_to_use(capsys, tmp_path):
    argv = ["--simulate", "--tokenizer", TOKENIZER, "--probe", "2", "--out", str(tmp_path)]
    code, out, err = providers(capsys, *argv)
    assert code == 0, err
    lines = out.splitlines()
    count = len(wire.PROVIDERS)
    assert lines[0] == f"{MODEL}: {count} providers probed, each answering every probe turn 2 times"
    rows = [line.split() for line in lines[2 : 2 + count]]
    # Providers are routed (and shown) by their endpoints' tags.
    tags = {name: facts[0] for name, facts in wire.ENDPOINT_FACTS.items()}
    stripping = tags[wire.STRIPPING_PROVIDER]
    assert sorted(row[0] for row in rows) == sorted(tags[name] for name in wire.PROVIDERS)
    assert rows[0][:2] != [stripping, "recommended"]
    assert [stripping, "excluded"] in [row[:2] for row in rows]
    block = out[out.index("[openrouter.provider]") :].splitlines()
    assert block[1] == f"order = {json.dumps([r[0] for r in rows if r[1] == 'recommended'])}"
    assert block[2].startswith("ignore = [") and f'"{stripping}"' in block[2]
    # The same command resumes the probes from --out: nothing is bought again.
    spent = [f["cost"] for f in json.loads(providers(capsys, *argv, "--json")[1])["providers"]]
    code, again, _ = providers(capsys, *argv, "--json")
    report = json.loads(again)
    assert code == 0 and stripping in report["routing"]["ignore"]
    assert [f["route"] for f in report["providers"]] == [row[0] for row in rows]
    assert [f["cost"] for f in report["providers"]] == spent
