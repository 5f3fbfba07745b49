"""The HTTP face of afm-struct: a FastAPI app implementing the streaming contract."""
