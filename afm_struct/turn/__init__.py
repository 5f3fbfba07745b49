"""The model's turn, read as it streams: what the generator puts out and what that text means.

:mod:`.outputs` holds what comes out of the generator (text deltas, ``Finished``, usage,
timings, finish reasons); :mod:`.markers` is the one scanner that finds markers (stop strings,
thinking tags, call openers) in text that arrives in pieces; :mod:`.reasoning` holds the
reasoning syntaxes as data and the turn's text state machine (the thinking split, the end of
the turn); :mod:`.turn` is one request's :class:`~.turn.Turn`, which the generator feeds and
whose phase its reasoning gate reads; :mod:`.events` are the answer events it yields and the
run's ending, which every protocol encoder writes.  No MLX, no HTTP, no protocol shapes.

Import from the submodules (the encoders import :mod:`.events` without loading the engine).
"""
