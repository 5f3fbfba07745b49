"""Chat Completions (``POST /v1/chat/completions``): the adapter from its request to the
generation plan (:mod:`.adapter`) and the encoder of run events into its chunks and body
(:mod:`.encoder`, shapes in :mod:`.chunks`)."""
