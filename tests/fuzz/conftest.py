"""The fuzz suite's live servers: one per family's tiny random-weight model, started on first use
and shared by the fuzz files a worker runs (building a family's model and warming a 150k
vocabulary costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .driver import FamilyServers


@pytest.fixture(scope="session")
def family_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FamilyServers]:
    """Live servers on the tiny models, started on first use, stopped with the session."""
    servers = FamilyServers(tmp_path_factory.mktemp("fuzz-families"))
    yield servers
    servers.stop()
