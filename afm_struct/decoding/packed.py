"""Packed ragged passes: each row's tokens once, no padding, through every per-position layer.

In a ragged step rows feed different numbers of tokens: a row fast-forwarding 4 forced tokens
next to 7 rows feeding 1.  Padding every row to the longest feed (``rows x longest`` positions)
made such a step cost what 32 positions cost, for 11 real ones; on the reference CPU an 8-row
step cost ~80 ms at 1 token a row and ~105 ms at 3-4.  Most of a layer works per position (the
q/k/v/o projections, the MLP, the norms), and only attention needs the rows: so the tokens are
packed into one sequence ``(1, T)`` for everything per position, and only attention gathers
them into the padded ``(rows, longest)`` layout the batch cache and its mask already handle,
then scatters the result back.  The model's weights are read once either way; the GEMMs see T
positions instead of ``rows x longest``.

This needs the attention's own structure, so it applies to mlx-lm's ``llama`` attention
(Llama, SmolLM, Mistral-style checkpoints); other models keep padded ragged passes.  The same
attention class computes attention itself through ``models/cpu_attention.py`` (packed or not),
which on the CPU replaces the softmax MLX runs one float at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from .forward import Head


@dataclass
class Packing:
    """Where each packed token sits in the padded layout, and back.

    ``gather`` has ``rows * longest`` entries: for padded slot ``(r, j)`` the packed index of
    row r's token j (a padding slot repeats the row's last token; its key lands past the row's
    length, where the next step overwrites it).  ``scatter`` has T entries: the padded slot of
    each packed token.
    """

    rows: int
    longest: int
    gather: mx.array
    scatter: mx.array
    last: mx.array  # packed index of each row's last token

    @classmethod
    def of(cls, feeds: list[int]) -> Packing:
        """The packing of rows feeding ``feeds[i]`` tokens (each at least 1)."""
        longest = max(feeds)
        starts, at = [], 0
        for n in feeds:
            starts.append(at)
            at += n
        gather = [s + min(j, n - 1) for s, n in zip(starts, feeds, strict=True) for j in range(longest)]
        scatter = [r * longest + j for r, n in enumerate(feeds) for j in range(n)]
        last = [s + n - 1 for s, n in zip(starts, feeds, strict=True)]
        return cls(len(feeds), longest, mx.array(gather), mx.array(scatter), mx.array(last))


def packed_attention_class(base: type) -> type:
    """A subclass of mlx-lm's llama ``Attention`` that also takes packed input, and runs the
    attention itself through :mod:`afm_struct.models.cpu_attention` (on the CPU, its softmax)."""
    from ..models import cpu_attention

    class PackedAttention(base):  # type: ignore[misc, valid-type]
        """Llama attention; with a packed cache, projections run on the packed tokens."""

        use_cpu_attention = cpu_attention.wanted()  # decided once, at class creation

        def attend(self, queries: mx.array, keys: mx.array, values: mx.array, cache: Any,
                   mask: Any) -> mx.array:
            return cpu_attention.scaled_dot_product_attention(
                queries, keys, values, cache=cache, scale=self.scale, mask=mask,
                enabled=self.use_cpu_attention)

        def __call__(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
            packing = getattr(cache, "packing", None)
            if packing is None:
                return self.unpacked(x, mask, cache)
            rows, longest = packing.rows, packing.longest
            flat = x[0]

            def padded(proj: Any, heads: int) -> mx.array:
                y = proj(flat)[packing.gather]
                return y.reshape(rows, longest, heads, -1).transpose(0, 2, 1, 3)

            queries = padded(self.q_proj, self.n_heads)
            keys = padded(self.k_proj, self.n_kv_heads)
            values = padded(self.v_proj, self.n_kv_heads)
            queries = self.rope(queries, offset=cache.offset)
            keys = self.rope(keys, offset=cache.offset)
            keys, values = cache.update_and_fetch(keys, values)
            out = self.attend(queries, keys, values, cache, mask)
            out = out.transpose(0, 2, 1, 3).reshape(rows * longest, -1)[packing.scatter]
            return self.o_proj(out[None])

        def unpacked(self, x: mx.array, mask: Any, cache: Any) -> mx.array:
            """mlx-lm's llama attention, step for step, with :meth:`attend` as the kernel."""
            b, n, _ = x.shape
            queries = self.q_proj(x).reshape(b, n, self.n_heads, -1).transpose(0, 2, 1, 3)
            keys = self.k_proj(x).reshape(b, n, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
            values = self.v_proj(x).reshape(b, n, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
            if cache is not None:
                queries = self.rope(queries, offset=cache.offset)
                keys = self.rope(keys, offset=cache.offset)
                keys, values = cache.update_and_fetch(keys, values)
            else:
                queries = self.rope(queries)
                keys = self.rope(keys)
            out = self.attend(queries, keys, values, cache, mask)
            return self.o_proj(out.transpose(0, 2, 1, 3).reshape(b, n, -1))

    return PackedAttention


def enable_packing(model: Any) -> bool:
    """Let the model's attention layers take packed input; False if the model is not one this
    knows how to pack (it then keeps padded ragged passes)."""
    try:
        from mlx_lm.models import llama
    except ImportError:  # pragma: no cover - mlx-lm is a dependency
        return False
    body = getattr(model, "model", None)
    layers = getattr(body, "layers", None)
    if type(model).__module__ != "mlx_lm.models.llama" or not layers:
        return False
    global _PACKED
    if _PACKED is None:
        _PACKED = packed_attention_class(llama.Attention)
    attns = [getattr(layer, "self_attn", None) for layer in layers]
    if not all(type(a) in (llama.Attention, _PACKED) for a in attns):
        return False
    for a in attns:
        a.__class__ = _PACKED
    return True


_PACKED: type | None = None


def packed_logits(model: Any, head: Head | None, feeds: list[list[int]], cache: list[Any],
                  packing: Packing) -> mx.array:
    """``(rows, V)`` logits at each row's last token, from one packed pass over ``feeds``."""
    tokens = mx.array([[t for f in feeds for t in f]])
    body = model.model if head is not None else model
    out = body(tokens, cache=cache)[0][packing.last]
    return head(out) if head is not None else out
