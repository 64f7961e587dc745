"""A count a whitespace repair would match is a strip only where the provider is known to strip."""

from __future__ import annotations

import collections
import sqlite3

from golden import run_rows

from draftgen.simulator import wire

RESPLIT = "re-tokenization (the model's ids are not the canonical encoding of its text) or altered"
STRIPPER = "this provider never returned content with whitespace at its edges, so it strips it"


def test_only_the_stripping_provider_has_whitespace_altered_samples(tmp_path, monkeypatch):
    rows = [
        {"id": f"r{i}", "messages": [{"role": "user", "content": f"Say {i}."}]} for i in range(48)
    ]
    config = {"seed": 4, "quirks": {"strip_whitespace": 0.5, "drift": 0.5}}
    truth, exported = run_rows(tmp_path, monkeypatch, "qwen3", rows, config)
    db = sqlite3.connect(tmp_path / "run" / "draftgen.sqlite")
    details = dict(db.execute("SELECT key, detail FROM samples"))
    reasons = collections.Counter()
    for row in exported:
        record = truth[row["generation_id"]]
        reason, detail = row["verify_reason"], details[row["key"]]
        reasons[reason, record["provider"] == wire.STRIPPING_PROVIDER] += 1
        if row["verified"]:
            assert row["input_ids"] == record["prompt_ids"] + record["completion_ids"]
        if reason == "whitespace_altered":
            # Named a strip only at the provider that strips, and only where it stripped.
            assert record["provider"] == wire.STRIPPING_PROVIDER
            assert "strip_whitespace" in record["quirks"]
            assert detail.endswith(STRIPPER) and RESPLIT not in detail
        elif reason == "completion_count_mismatch":
            assert "drift" in record["quirks"] or "strip_whitespace" in record["quirks"]
            assert RESPLIT in detail
    # Drift elsewhere that a restored space would also explain says so, and is no strip.
    repaired_elsewhere = [
        row
        for row in exported
        if row["verify_reason"] == "completion_count_mismatch"
        and "would also match the count" in details[row["key"]]
        and truth[row["generation_id"]]["provider"] != wire.STRIPPING_PROVIDER
    ]
    assert repaired_elsewhere, reasons
    assert reasons["whitespace_altered", True] >= 3, reasons
