"""The generation loop: sampling, masks, fast-forward, stop sequences, detokenization."""
