"""Shared fixtures: the embedded tokenizer, the real embedded model, scripted models."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
# Servers the tests start from the command line keep their default response store
# ($XDG_DATA_HOME/afm-struct/responses.sqlite3) in a throwaway directory, not the user's.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="afm-struct-test-data-")

import pytest

from afm_struct.models import LoadedModel, load_model, load_tokenizer
from afm_struct.models.tokenizer import Tokenizer

# Every 4xx from a live server names a place in its request (checked after each test).
from .error_params import error_params_name_request_paths, record_error_responses  # noqa: F401


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    """The embedded model's tokenizer (no weights)."""
    return load_tokenizer()


@pytest.fixture(scope="session")
def embedded() -> LoadedModel:
    """The real embedded SmolLM2-135M, loaded once per session."""
    return load_model()
