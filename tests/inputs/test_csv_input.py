"""A CSV input is refused in one sentence saying CSV is not read and what is, not as a file of
lines that are "not valid JSON"; CSV glaive columns through --input-format hf still read."""

from __future__ import annotations

import pytest
from conftest import draftgen

from draftgen.inputs.ingest import Conversation, InputError, read_conversations

READS = (
    "is CSV, which draftgen does not read (it reads JSONL, a .json array, .parquet or a "
    "datasets.save_to_disk directory): convert it to JSONL, one object with 'messages' per "
    "line, or read glaive 'system' and 'chat' columns from it with --input-format hf"
)


@pytest.mark.parametrize("name", ["prompts.csv", "prompts.TSV"])
def test_a_csv_file_is_refused_whole_in_one_sentence(tmp_path, name):
    path = tmp_path / name
    path.write_text("role,content\nuser,hi\n")
    with pytest.raises(InputError) as refused:
        list(read_conversations([str(path)]))
    assert str(refused.value) == f"{path} {READS}"


def test_a_run_given_csv_stops_before_its_directory_is_made(tmp_path):
    path = tmp_path / "prompts.csv"
    path.write_text("role,content\nuser,hi\n")
    argv = ["run", "--model", "m", "--tokenizer", "fixture:qwen3", "--input", str(path)]
    result = draftgen(*argv, "--out", str(tmp_path / "run"), "--no-config")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == f"draftgen: {path} {READS}"
    assert "not valid JSON" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_glaive_columns_of_a_csv_file_are_read_with_input_format_hf(tmp_path):
    path = tmp_path / "glaive.csv"
    path.write_text('system,chat\n"SYSTEM: be kind","USER: hi\nASSISTANT: hello"\n')
    (row,) = list(read_conversations([str(path)], "hf"))
    assert isinstance(row, Conversation)
    assert row.messages == (
        {"role": "system", "content": "be kind"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    )
