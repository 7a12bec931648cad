"""Showing strings that came from files devicefit does not control.

Op, tensor and custom-op names come from a model downloaded anywhere; model and profile
names come from a project file in a pull request. Raw, an ``ESC [2J`` clears the user's
terminal, a bidi override reorders what a reviewer reads, and one control character makes a
JUnit report invalid XML that CI then refuses to parse. Every view passes such strings
through :func:`clean` (visible ``\\xNN`` escapes instead of the character) and then through
its own format's quoting (:func:`markdown`, ``html.escape``, ElementTree).
"""

from __future__ import annotations

import re

#: C0 controls except tab and newline, DEL, C1 controls, bidi embeddings/overrides/isolates,
#: the line/paragraph separators, lone surrogates and the two XML non-characters.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
_UNSAFE_ONE_LINE = re.compile(_UNSAFE.pattern[:-1] + "\t\n]")
#: Characters with a meaning in Markdown (GitHub flavour, inline) or in HTML inside it; an
#: underscore only where it can start or end emphasis (``mlp_int8`` stays readable).
_MARKDOWN = re.compile(r"([\\`*\[\]<>|~&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return {9: "\\t", 10: "\\n", 13: "\\r"}.get(code) or (
        f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def clean(text: object, *, one_line: bool = False) -> str:
    """``text`` with every control, bidi and XML-invalid character as a visible escape;
    ``one_line`` escapes tabs and newlines too (names, table cells)."""
    return (_UNSAFE_ONE_LINE if one_line else _UNSAFE).sub(_visible, str(text))


def markdown(text: object) -> str:
    """One line of inline Markdown showing ``text`` literally."""
    return _MARKDOWN.sub(r"\\\1", clean(text, one_line=True))


def markdown_code(text: object) -> str:
    """``text`` as an inline code span, fenced with more backticks than it contains."""
    body = clean(text, one_line=True).replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall("`+", body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"
