"""The generic profile: a generated turn's layout derived from a chat template no profile claims.

Every family whose fixture renders through a Jinja template is derived too and compared with its
own profile; Gemma 3, Phi-4-reasoning and Seed-OSS-shaped templates (written here after the
published ones) are derived as models draftgen has no module for.
"""

from __future__ import annotations

import copy
import json

import pytest

from draftgen.profiles import DERIVED_LAYOUT, GENERIC, PROFILE_NAMES, run_profile_named
from draftgen.profiles.generic import DerivedLayout
from draftgen.tokens.derived_profile import DerivationError, derive_layout, template_variables
from draftgen.tokens.rendering import derived_layout, resolve_profile
from draftgen.tokens.tokenizer import load_tokenizer

# Fixtures rendered through a Jinja template, by name: the fields their derived layout must share
# with their own profile. Where a template does not render reasoning, the whitespace inside the
# think block is the provider's to deliver and is not compared (the count decides it).
RENDERS_REASONING = (
    "end_of_turn",
    "think_start",
    "think_end",
    "think_lead",
    "reasoning_pad",
    "answer_lead",
)
MARKERS_ONLY = ("end_of_turn", "think_start", "think_end")
FAMILY_FIXTURES = {
    "kimi-k2.5": MARKERS_ONLY,
    "kimi-k2-thinking": MARKERS_ONLY,
    "deepseek-v3-thinking": MARKERS_ONLY,
    "deepseek-v3.1": MARKERS_ONLY,
    "qwen3": RENDERS_REASONING,
    "qwen3-thinking-2507": RENDERS_REASONING,
    "qwen3-instruct-2507": MARKERS_ONLY,
    "qwen3.5": RENDERS_REASONING,
    "glm-4.6": RENDERS_REASONING,
    "glm-5.2": RENDERS_REASONING,
    "glm-5.3": RENDERS_REASONING,
    "minimax-m2": RENDERS_REASONING,
    "llama-3.3": MARKERS_ONLY,
    "llama-4": MARKERS_ONLY,
}


@pytest.mark.parametrize("name", sorted(FAMILY_FIXTURES))
def test_each_familys_template_derives_its_own_profile(name):
    tokenizer = load_tokenizer(f"fixture:{name}")
    own = resolve_profile(tokenizer)
    layout = derived_layout(tokenizer)
    for field in FAMILY_FIXTURES[name]:
        assert getattr(layout, field) == getattr(own, field), (name, field)
    variables = template_variables(tokenizer.chat_template)
    if own.thinking_variable in variables:
        assert layout.thinking_variable == own.thinking_variable
    assert layout.generation_prompt and layout.generation_prompt in tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
    )


def shaped(name: str):
    """A fixture of a model no profile claims (draftgen_testing.families.generic), a copy."""
    return copy.deepcopy(load_tokenizer(f"fixture:{name}"))


def test_gemma_3_shaped_template():
    layout = derive_layout(shaped("gemma-3"))
    assert layout.generation_prompt == "<start_of_turn>model\n"
    assert layout.end_of_turn == "<end_of_turn>"
    assert (layout.think_start, layout.think_end) == ("", "")
    assert layout.variables == ()  # the names it sets in branches are its own, not variables
    assert any("no think block" in note for note in layout.notes)
    profile = layout.profile()
    # No think block: every prompt is closed, so reasoning returned for one is flagged.
    assert profile.prompt_mode("<start_of_turn>model\n") == "closed"


def test_phi_4_reasoning_shaped_template_takes_its_markers_from_the_vocabulary():
    layout = derive_layout(shaped("phi-4-reasoning"))
    assert layout.generation_prompt == "<|im_start|>assistant<|im_sep|>"
    assert layout.end_of_turn == "<|im_end|>"
    assert (layout.think_start, layout.think_end) == ("<think>", "</think>")
    assert any("from the vocabulary" in note for note in layout.notes)
    assert layout.profile().prompt_mode(layout.generation_prompt) == "model_opens"


def test_seed_oss_shaped_template_renders_its_think_block_and_reads_a_budget():
    layout = derive_layout(shaped("seed-oss"))
    assert layout.generation_prompt == "<seed:bos>assistant\n"
    assert layout.end_of_turn == "<seed:eos>"
    assert (layout.think_start, layout.think_end) == ("<seed:think>", "</seed:think>")
    assert layout.reasoning_pad == ("", "") and layout.answer_lead == ""
    assert layout.variables == ("thinking_budget",)
    assert any("renders 'reasoning_content'" in note for note in layout.notes)


def test_a_generation_prompt_that_opens_the_think_block_starts_inside_it():
    tokenizer = load_tokenizer("fixture:qwen3-thinking-2507")
    profile = derived_layout(tokenizer).profile()
    assert profile.prompt_mode("<|im_start|>assistant\n<think>\n") == "open"
    assert profile.reasoning_pad == ("\n", "\n")


def test_the_template_says_where_a_glm_turn_ends():
    # GLM writes nothing after an answer: the next turn's header is what the model stops at.
    layout = derived_layout(load_tokenizer("fixture:glm-4.6"))
    assert layout.end_of_turn == "<|user|>"


def test_a_tokenizer_without_template_or_profile_is_refused_in_one_sentence():
    tokenizer = shaped("gemma-3")
    tokenizer.chat_template = None
    with pytest.raises(DerivationError, match="no chat template to derive the layout from"):
        derive_layout(tokenizer)


def test_a_template_without_a_generation_prompt_is_refused():
    tokenizer = shaped("gemma-3")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}<end_of_turn>{% endfor %}"
    with pytest.raises(DerivationError, match="generation prompt"):
        derive_layout(tokenizer)


def test_generic_is_a_profile_name_and_forces_the_derived_layout():
    assert PROFILE_NAMES[-1] == GENERIC
    tokenizer = load_tokenizer("fixture:qwen3")
    forced = resolve_profile(tokenizer, GENERIC)
    assert forced.name == GENERIC and forced.derived == derived_layout(tokenizer)
    assert (forced.think_start, forced.end_of_turn) == ("<think>", "<|im_end|>")


def test_the_stored_layout_gives_the_same_profile_back():
    layout = derive_layout(shaped("seed-oss"))
    stored = json.dumps(layout.to_json())
    again = run_profile_named(GENERIC, stored)
    assert again == layout.profile()
    assert DerivedLayout.from_json(json.loads(stored)).notes == layout.notes
    assert DERIVED_LAYOUT == "derived_layout"
    with pytest.raises(ValueError, match="holds no derived layout"):
        run_profile_named(GENERIC, None)


def test_describe_lists_what_was_derived():
    lines = derive_layout(shaped("seed-oss")).describe()
    assert lines[0] == "generation prompt '<seed:bos>assistant\\n'"
    assert "think block '<seed:think>' ... '</seed:think>'" in lines
    assert "template variables thinking_budget" in lines


@pytest.mark.parametrize("name", ["gemma-3", "phi-4-reasoning", "seed-oss"])
def test_a_model_no_profile_claims_gets_the_generic_profile(name):
    tokenizer = load_tokenizer(f"fixture:{name}")
    profile = resolve_profile(tokenizer)
    assert profile.name == GENERIC and profile.derived == derive_layout(tokenizer)
