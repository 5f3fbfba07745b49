"""The tokenizer's derived parts every request may need, built at model load, not on a request.

Each part is built by the layer that uses it and kept in the tokenizer's
:class:`~afm_struct.models.derived.DerivedParts`; this is the one list of those the generator's
warm-up builds before the first request (compilers are built by the first request needing one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..grammar.closer.vocab import closing_vocab_for
from ..grammar.engines.llguidance_engine import ll_tokenizer_for
from .hidden_tokens import hidden_token_ids
from .logprobs import token_table

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer


def build_tokenizer_parts(tokenizer: Tokenizer) -> None:
    """Build llguidance's tokenizer, the closing vocabulary, the logprobs token table and the
    hidden tokens of a request without tools or thinking (others on the first request needing
    them)."""
    ll_tokenizer_for(tokenizer)
    closing_vocab_for(tokenizer)
    token_table(tokenizer)
    hidden_token_ids(tokenizer)
