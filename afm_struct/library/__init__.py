"""The library's high-level calls for extraction pipelines: messages + schema -> a validated value.

:mod:`.extraction` holds :func:`~.extraction.extract` (reached as ``afm_struct.extract``): it
loads the model once, compiles the schema, generates and validates; :mod:`.confidence` gives
each field of the result its confidence from its tokens' logprobs.  Built on the engine's
layers, used by nothing below them.
"""
