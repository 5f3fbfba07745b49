"""Streaming text helpers shared by the decoder, the tool parser and the server: no MLX.

:mod:`.markers` is the one scanner that finds markers (stop strings, thinking tags, tool-call
openers) in text that arrives in pieces; :mod:`.reasoning` is the turn's state machine over it (reasoning
syntaxes as data, the thinking split, the end of the turn);
:mod:`.values` refuses input no tokenizer or grammar engine can take (lone surrogates, NaN).
"""
