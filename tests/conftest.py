"""Shared fixtures: the embedded tokenizer, the real embedded model, scripted models."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
# Servers the tests start from the command line keep their default response store
# ($XDG_DATA_HOME/afm-struct/responses.sqlite3) in a throwaway directory, not the user's.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="afm-struct-test-data-")

import pytest

from afm_struct.models import LoadedModel, load_model, load_tokenizer
from afm_struct.models.tokenizer import Tokenizer

# Every 4xx from a live server names a place in its request (checked after each test).
from .error_params import error_params_name_request_paths, record_error_responses  # noqa: F401

# One disk cache (afm_struct/models/disk_cache.py) for the whole run, made by the first process
# (the xdist controller) and inherited by its workers and every server they start: the
# tokenizer and closing vocabulary are built once per run, then read back (~1 s saved per
# `afm-struct serve` subprocess and per in-process load).  Never the user's own cache.
_CACHE_ENV = "AFM_STRUCT_TEST_CACHE_DIR"
_made_cache = _CACHE_ENV not in os.environ
if _made_cache:
    os.environ[_CACHE_ENV] = tempfile.mkdtemp(prefix="afm-struct-test-cache-")
os.environ["AFM_STRUCT_CACHE_DIR"] = os.environ[_CACHE_ENV]


def _share_default_tls_context() -> None:
    """Every ``httpx.Client()`` with default verification builds one ``ssl.SSLContext`` and
    loads certifi's ~150 CA certificates into it (~20 ms of CPU).  The suite makes thousands
    of one-shot ``httpx.post``/``httpx.stream`` calls to plain-HTTP servers, and a profile of
    tests/server/test_responses_http.py put 20 % of its CPU there.  The tests share one
    default context per environment (httpx documents passing a context as ``verify``; no
    test changes one), every other ``verify`` goes through untouched."""
    import functools

    import httpx._transports.default as transport

    build = transport.create_ssl_context

    @functools.lru_cache(maxsize=4)
    def default_context(trust_env: bool, cert_file: str | None, cert_dir: str | None) -> object:
        return build(verify=True, cert=None, trust_env=trust_env)

    def create_ssl_context(verify: object = True, cert: object = None, trust_env: bool = True) -> object:
        if verify is True and cert is None:
            return default_context(trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        return build(verify=verify, cert=cert, trust_env=trust_env)

    transport.create_ssl_context = create_ssl_context  # type: ignore[assignment]


_share_default_tls_context()


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` (``make test``) hands out the longest files first (tests/suite_schedule.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from .suite_schedule import LongestFileFirstScheduling

    return LongestFileFirstScheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's disk cache is removed by the process that made it, once the run is over."""
    if _made_cache and not os.environ.get("PYTEST_XDIST_WORKER"):
        import shutil

        shutil.rmtree(os.environ[_CACHE_ENV], ignore_errors=True)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test phase's time, to ``AFM_STRUCT_SUITE_LOG`` when set (tests/suite_schedule.py)."""
    # Under xdist the controller sees every worker's reports: log there only, once each.
    if os.environ.get("AFM_STRUCT_SUITE_LOG") and not os.environ.get("PYTEST_XDIST_WORKER"):
        from .suite_schedule import log_report_duration

        log_report_duration(report)


@pytest.fixture(autouse=True)
def root_logging_restored() -> Iterator[None]:
    """Tests that run the CLI in-process configure the root logger with a handler on that
    test's captured stderr; left in place, a later test's log line hits the closed stream
    ("--- Logging error ---" in CI). Each test gets the root logger back as it found it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    """The embedded model's tokenizer (no weights)."""
    return load_tokenizer()


@pytest.fixture(scope="session")
def embedded() -> LoadedModel:
    """The real embedded SmolLM2-135M, loaded once per session."""
    return load_model()
