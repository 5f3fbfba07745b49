"""Streaming text helpers shared by the decoder, the tool parser and the server: no MLX.

:mod:`.markers` is the one scanner that finds markers (stop strings, thinking tags, tool-call
openers) in text that arrives in pieces; :mod:`.reasoning` splits thinking blocks off with it.
"""
