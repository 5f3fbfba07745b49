"""``make test``'s xdist schedule hands out the longest recorded files first (tests/suite_schedule.py)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from .suite_schedule import (
    SHARED_FIXTURE_UNITS,
    UNKNOWN_FILE_S,
    LongestFileFirstScheduling,
    durations_from_junit,
    durations_from_log,
    file_weights,
)


class FakeWorker:
    """What the scheduler needs of an xdist worker: it records the test indexes it is sent."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = SimpleNamespace(id=name)  # named in the scheduler's collection check
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(list(indexes))

    def shutdown(self) -> None:
        self.shutting_down = True


COLLECTION = [
    "tests/a/test_many_fast.py::test_1", "tests/a/test_many_fast.py::test_2",
    "tests/a/test_many_fast.py::test_3", "tests/a/test_many_fast.py::test_4",
    "tests/b/test_few_slow.py::test_1",
    "tests/c/test_middle.py::test_1", "tests/c/test_middle.py::test_2",
    "tests/d/test_new.py::test_1",
]


def files_sent(worker: FakeWorker, collection: list[str] = COLLECTION) -> list[str]:
    """The files of each batch sent to ``worker``, in order."""
    return [collection[batch[0]].split("::")[0] for batch in worker.sent]


def schedule(pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch, weights: dict[str, float],
             workers: int, collection: list[str] = COLLECTION) -> list[FakeWorker]:
    """The batches a scheduler sends to ``workers`` fake workers of the same collection."""
    # The scheduler counts its workers from ``--tx`` (``-n N`` sets it to ``N*popen``).
    monkeypatch.setattr(pytestconfig.option, "tx", [f"{workers}*popen"])
    monkeypatch.setattr(pytestconfig.option, "loadscopereorder", True)  # loadfile's default
    scheduler = LongestFileFirstScheduling(pytestconfig, weights=weights)
    nodes = [FakeWorker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
    for node in nodes:
        scheduler.add_node_collection(node, collection)  # type: ignore[arg-type]
    scheduler.schedule()
    # Each worker runs what it was sent, one test at a time, in turn; the scheduler sends more
    # as they complete, until every test is done.
    done: dict[str, int] = {node.name: 0 for node in nodes}
    while not scheduler.tests_finished:
        progressed = False
        for node in nodes:
            sent = [i for batch in node.sent for i in batch]
            if done[node.name] < len(sent):
                scheduler.mark_test_complete(node, sent[done[node.name]], 0.0)  # type: ignore[arg-type]
                done[node.name] += 1
                progressed = True
        assert progressed, "the scheduler stopped sending work before every test ran"
    return nodes


def test_the_longest_recorded_file_goes_out_first_and_an_unknown_one_before_short_ones(
        pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = {"tests/a/test_many_fast.py": 2.0, "tests/b/test_few_slow.py": 300.0,
               "tests/c/test_middle.py": UNKNOWN_FILE_S - 1}
    (only,) = schedule(pytestconfig, monkeypatch, weights, workers=1)
    # loadfile's own order would start with the file of most tests (test_many_fast).
    assert files_sent(only) == ["tests/b/test_few_slow.py", "tests/d/test_new.py",
                                "tests/c/test_middle.py", "tests/a/test_many_fast.py"]
    # Every test is sent exactly once, each file as one whole batch.
    assert sorted(i for batch in only.sent for i in batch) == list(range(len(COLLECTION)))


def test_two_workers_start_on_the_two_longest_files(pytestconfig: pytest.Config,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    weights = {"tests/a/test_many_fast.py": 1.0, "tests/b/test_few_slow.py": 300.0,
               "tests/c/test_middle.py": 100.0, "tests/d/test_new.py": 0.5}
    first, second = schedule(pytestconfig, monkeypatch, weights, workers=2)
    assert {files_sent(first)[0], files_sent(second)[0]} == {"tests/b/test_few_slow.py",
                                                            "tests/c/test_middle.py"}
    sent = [i for node in (first, second) for batch in node.sent for i in batch]
    assert sorted(sent) == list(range(len(COLLECTION)))


def test_a_missing_or_broken_table_weighs_every_file_the_same(tmp_path: Path) -> None:
    assert file_weights(tmp_path / "absent.json") == {}
    (tmp_path / "bad.json").write_text("[1, 2")
    assert file_weights(tmp_path / "bad.json") == {}


def test_durations_sum_per_file_from_a_log_and_from_junit(tmp_path: Path) -> None:
    log = tmp_path / "log.tsv"
    log.write_text("tests/x/test_a.py\tsetup\t1.5\ntests/x/test_a.py\tcall\t2.0\n"
                   "tests/test_b.py\tcall\t9.0\n")
    assert durations_from_log(log) == {"tests/test_b.py": 9.0, "tests/x/test_a.py": 3.5}
    assert list(durations_from_log(log)) == ["tests/test_b.py", "tests/x/test_a.py"]
    junit = tmp_path / "report.xml"
    junit.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.x.test_a.TestK" name="t1" time="1.5"/>'
        '<testcase classname="tests.x.test_a" name="t2" time="0.5"/>'
        '<testcase classname="tests.test_b" name="t" time="4"/>'
        '</testsuite></testsuites>')
    assert durations_from_junit(junit) == {"tests/test_b.py": 4.0, "tests/x/test_a.py": 2.0}


CLUSTER_COLLECTION = [
    "tests/a/test_many_fast.py::test_1",
    "tests/cluster/test_balancer.py::test_1", "tests/cluster/test_balancer.py::test_2",
    "tests/cluster/test_cluster_cli.py::test_1",
    "tests/cluster/test_responses_cancel.py::test_1",
    "tests/cluster/test_tenancy.py::test_1", "tests/cluster/test_tenancy.py::test_2",
    "tests/d/test_new.py::test_1",
]


def test_the_files_sharing_the_cluster_fixture_run_on_one_worker_one_after_another(
        pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = {"tests/cluster/test_balancer.py": 80.0, "tests/cluster/test_cluster_cli.py": 30.0,
               "tests/cluster/test_responses_cancel.py": 20.0, "tests/cluster/test_tenancy.py": 27.0,
               "tests/a/test_many_fast.py": 100.0, "tests/d/test_new.py": 1.0}
    nodes = schedule(pytestconfig, monkeypatch, weights, workers=2, collection=CLUSTER_COLLECTION)
    shared = [i for i, nodeid in enumerate(CLUSTER_COLLECTION)
              if nodeid.split("::")[0] in SHARED_FIXTURE_UNITS]
    batches = [batch for node in nodes for batch in node.sent]
    # One batch, in collection order, nothing else between: pytest keeps the package's fixture.
    assert shared in batches
    # Weighed as their sum (127 s), the unit goes out before the 100 s file.
    assert any(node.sent[0] == shared for node in nodes)
    assert sorted(i for batch in batches for i in batch) == list(range(len(CLUSTER_COLLECTION)))
    assert [b for b in batches if b != shared and any(i in shared for i in b)] == []


def test_every_file_taking_the_cluster_fixture_is_in_its_unit() -> None:
    cluster_dir = Path(__file__).parent / "cluster"
    takers = set()
    for path in sorted(cluster_dir.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") \
                    and "cluster" in [a.arg for a in node.args.args]:
                takers.add(f"tests/cluster/{path.name}")
    assert takers == set(SHARED_FIXTURE_UNITS)
