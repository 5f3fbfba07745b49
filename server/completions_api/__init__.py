"""``POST /v1/completions``: OpenAI's legacy text completions over the protocol-neutral core."""
