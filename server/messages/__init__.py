"""Anthropic's Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``) on the
protocol-neutral core: :mod:`.adapter` reads a request into a generation plan, :mod:`.encoder`
writes the run's events as Anthropic's message or its SSE events."""
