"""GPT-2's byte-level BPE alphabet: the printable character that stands for each byte.

Byte-level vocabularies (GPT-2, Llama 3, Qwen, SmolLM) write every byte as one printable
character, so a token's text is not its bytes.  The grammar engines' vocabulary tables and the
logprobs' ``bytes`` field both read tokens back to bytes through this one table.
"""

from __future__ import annotations

from functools import cache


@cache
def byte_decoder() -> dict[str, int]:
    """Stand-in character → byte (the inverse of GPT-2's ``bytes_to_unicode``)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:  # bytes without a printable form get characters from 256 on
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}
