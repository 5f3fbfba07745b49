"""Small pieces of Lark text shared by the tool grammar builders.

:func:`markup` writes a syntax's literal text (``<|channel|>commentary to=functions.``,
``</arg_value>``) as the sequence of added tokens (by id) and plain literals it is made of:
llguidance keeps added tokens out of the byte alphabet, so a literal would never match one.
:func:`ordered_members` writes an ordered list of members, some optional, joined by a
separator (keyword arguments, dict entries, tag pairs).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer


def added_tokens(tokenizer: Tokenizer) -> dict[str, int]:
    """``text -> id`` of every added token of the vocabulary (special or not)."""
    hf = getattr(tokenizer, "hf", None)
    decoder = getattr(hf, "added_tokens_decoder", None) or {}
    out: dict[str, int] = {}
    for token_id, token in decoder.items():
        content = getattr(token, "content", None)
        if isinstance(content, str) and content:
            out[content] = int(token_id)
    return out


def split_markup(tokenizer: Tokenizer, text: str) -> list[tuple[bool, str]]:
    """``text`` as ``(is_added_token, piece)`` pieces: added tokens leftmost, longest first."""
    table = added_tokens(tokenizer)
    specials = sorted((t for t in table if t in text), key=len, reverse=True)
    pieces: list[tuple[bool, str]] = []
    plain = ""
    i = 0
    while i < len(text):
        hit = next((t for t in specials if text.startswith(t, i)), None)
        if hit is None:
            plain += text[i]
            i += 1
            continue
        if plain:
            pieces.append((False, plain))
            plain = ""
        pieces.append((True, hit))
        i += len(hit)
    if plain:
        pieces.append((False, plain))
    return pieces


def markup(tokenizer: Tokenizer, text: str) -> str:
    """``text`` in Lark: added tokens as ``<[id]>``, the rest as string literals ('' if empty)."""
    return markup_pieces(tokenizer, split_markup(tokenizer, text))


def regex_literal(text: str) -> str:
    """``text`` as a Lark regex body (line breaks as ``\\n``, slashes escaped)."""
    return re.escape(text).replace("\\\n", "\\n").replace("\n", "\\n").replace("/", "\\/")


def text_until(tokenizer: Tokenizer, name: str, end: str, body: str = "(.|\\n)*") -> str:
    """A rule ``name``: free text (``body``) up to and including ``end``, its first occurrence.

    When ``end`` begins with plain text, the rule is a lazy lexeme that ends at it; when it
    begins with an added token, text cannot contain that token, so plain text ends there.
    """
    pieces = split_markup(tokenizer, end)
    if pieces and not pieces[0][0]:
        tail = markup_pieces(tokenizer, pieces[1:])
        return f"{name}[lazy]: /{body}{regex_literal(pieces[0][1])}/" + (f" {tail}" if tail else "")
    return f"{name}: /{body}/ {markup(tokenizer, end)}".rstrip()


def markup_pieces(tokenizer: Tokenizer, pieces: list[tuple[bool, str]]) -> str:
    """Pieces of :func:`split_markup` in Lark."""
    table = added_tokens(tokenizer)
    return " ".join(f"<[{table[p]}]>" if special else json.dumps(p) for special, p in pieces)


def ordered_members(members: list[tuple[str, bool]], sep: str, prefix: str,
                    rules: list[str]) -> str | None:
    """An expression for ``members`` (``(expression, required)``) in order, each optional one
    present or not, joined by ``sep`` (a Lark expression, '' for none).

    Helper rules named ``<prefix>_f<k>`` (nothing written yet) and ``<prefix>_r<k>`` (something
    written) are appended to ``rules``.  None when the members can only be absent.
    """
    if not members:
        return None
    n = len(members)
    rest: list[str | None] = [None] * (n + 1)  # after something was written
    first: list[str | None] = [None] * (n + 1)  # before anything was written
    for k in range(n - 1, -1, -1):
        expr, required = members[k]
        joined = f"{sep} {expr}" if sep else expr
        tail = f" {rest[k + 1]}" if rest[k + 1] else ""
        name = f"{prefix}_r{k}"
        if required:
            rules.append(f"{name}: {joined}{tail}")
        else:
            alts = [f"{joined}{tail}"] + ([rest[k + 1]] if rest[k + 1] else [])
            rules.append(f"{name}: " + " | ".join(alts) if rest[k + 1] else f"{name}: ({joined})?")
        rest[k] = name
        fname = f"{prefix}_f{k}"
        here = f"{expr}{tail}"
        alts = [here] if required or first[k + 1] is None else [here, first[k + 1]]
        rules.append(f"{fname}: " + " | ".join(alts))
        first[k] = fname
    # first[0] may still derive nothing only if every member is optional.
    if all(not required for _, required in members):
        return f"{first[0]}?"
    return first[0]
