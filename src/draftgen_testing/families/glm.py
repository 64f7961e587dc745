"""GLM-4.6's offline tokenizer: Qwen's ranks, GLM's added tokens after them."""

from __future__ import annotations

from draftgen_testing.specs import QwenBpeFixture

# GLM-4.5/4.6's added tokens in their real order, the first at 151329. GLM's own BPE is not
# available offline and Qwen's 151643 ranks overlap those ids, so the fixture appends them after
# Qwen's ranks: each sits at its real id + 314 (151329 + 314 = 151643).
GLM_REAL_FIRST_ID = 151329
GLM_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
    "<|begin_of_transcription|>",
    "<|end_of_transcription|>",
    "<|code_prefix|>",
    "<|code_middle|>",
    "<|code_suffix|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "/nothink",
)
GLM_SPECIAL_TOKENS: dict[int, str] = dict(enumerate(GLM_TOKENS, start=151643))
# GLM marks its think and tool tokens `special: false` like Qwen3 (*unconfirmed*: only whether
# skip_special_tokens keeps them depends on it).
GLM_NON_SPECIAL = frozenset(GLM_TOKENS[GLM_TOKENS.index("<think>") :])

FIXTURES = {
    "glm-4.6": QwenBpeFixture(
        added_tokens=GLM_SPECIAL_TOKENS,
        vocab_size=max(GLM_SPECIAL_TOKENS) + 1,
        non_special=GLM_NON_SPECIAL,
        config={
            "bos_token": None,
            "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": 202752,
        },
    ),
}
