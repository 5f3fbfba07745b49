"""Streaming text helpers shared by the decoder, the tool parser and the server: no MLX.

:mod:`.markers` is the one scanner that finds markers (stop strings, thinking tags, tool-call
openers) in text that arrives in pieces; :mod:`.reasoning` splits thinking blocks off with it;
:mod:`.values` refuses input no tokenizer or grammar engine can take (lone surrogates, NaN).
"""
