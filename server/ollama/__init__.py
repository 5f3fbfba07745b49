"""Ollama's API (``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``, ``/api/version``)
over the protocol-neutral core: an adapter, a pure NDJSON encoder and the routes."""
