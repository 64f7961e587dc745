"""Varied text for the simulated model to "write": the material that breaks naive tokenization.

English, punctuation, numbers, indented code, CJK, accented letters, emoji (ZWJ sequences and
flags included) and runs of spaces, so byte-level BPE edge cases show up in every run.
"""

from __future__ import annotations

import random

FRAGMENTS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Let me think about this step by step.",
    "First, we compute the total; then we divide by the count.",
    "However, that assumption does not hold when the input is empty!",
    "Is it really that simple? Probably not...",
    "In summary: yes, no, maybe -- it depends (on context).",
    'She said, "don\'t panic," and left.',
    "It's a well-known result; see e.g. [1], [2] & [3].",
    "Wait, let me double-check the edge case.",
    "So the answer should be 42.",
    "Pi is approximately 3.14159265, and e is about 2.71828.",
    "The population grew from 1,234,567 to 2,345,678 between 1999 and 2026.",
    "Temperatures ranged from -40 to +45 degrees (a 85-degree spread).",
    "Version 10.0.19045 shipped on 2024-03-15T08:30:00Z.",
    "0x7fffffff == 2147483647",
    "```python\ndef add(a, b):\n    return a + b\n```",
    "```python\nfor i in range(10):\n    if i % 2 == 0:\n        print(i)\n```",
    "```js\nconst xs = [1, 2, 3].map((x) => x * 2);\nconsole.log(xs);\n```",
    "```\n$ ls -la\ntotal 8\n```",
    "    indented line with four spaces",
    "\tone tab\n\t\ttwo tabs",
    "key:    value   with    runs   of     spaces",
    "a  b   c    d     e",
    "这是一个测试句子，用来检查中文分词。",
    "日本語のテキストも含まれています。",
    "한국어 문장도 있습니다.",
    "混合 mixed テキスト text 文本.",
    "Café, naïve, façade, résumé, jalapeño.",
    "Ærøskøbing, São Paulo, Zürich, Kraków, Reykjavík.",
    "Ελληνικά και русский текст.",
    "I love this 🙂 and that 🚀✨.",
    "Family: 👨‍👩‍👧‍👦, coder: 👩‍💻, flags: 🇫🇷🇯🇵.",
    "Thumbs up 👍🏽 — em dash, en – dash, ellipsis…",
    "∑ x² ≤ ∞, ∀ε > 0 ∃δ > 0.",
    "| col a | col b |\n|-------|-------|\n| 1     | 2     |",
    "- item one\n- item two\n  - nested item",
    "**bold**, _italic_, `code`, and ~~strike~~.",
    "C:\\Users\\name\\file.txt and /usr/local/bin",
    "https://example.com/path?query=1&other=two#frag",
    '{"key": [1, 2.5, null, true], "nested": {"x": "y"}}',
)

SEPARATORS: tuple[str, ...] = (" ", " ", " ", "\n", "\n\n", "  ", "")


def compose(rng: random.Random, target_tokens: int, token_count) -> str:
    """Join random fragments until their (approximate) token count reaches ``target_tokens``.

    ``token_count(fragment)`` gives a fragment's token count; boundaries merge a little, which is
    fine: lengths are only roughly controlled. Outer whitespace is stripped so the caller decides
    the exact layout around the text.
    """
    parts: list[str] = []
    total = 0
    while total < target_tokens:
        fragment = rng.choice(FRAGMENTS)
        count = token_count(fragment)
        if not parts and count > 2 * target_tokens:
            # A short answer: the first few words of one fragment.
            fragment = " ".join(fragment.split(" ")[: max(1, target_tokens // 2)])
            count = token_count(fragment)
        if parts:
            parts.append(rng.choice(SEPARATORS))
        parts.append(fragment)
        total += count
    return "".join(parts).strip()
