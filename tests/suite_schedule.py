"""The order ``make test`` hands test files to its xdist workers: the longest first.

``--dist loadfile`` queues files by their number of tests, so a file of a few slow cases (a
cluster of real processes, a model load) can start last and run alone while the other worker
idles.  With the longest files first (longest-processing-time first, a greedy schedule within
4/3 of the best) the short ones fill the gaps at the end.  The weights are the seconds each file
took in a measured run (``suite_durations.json``, written by ``python -m tests.suite_schedule
JUNIT_XML``; see benchmarks/suite/README.md); a file not listed there (a new one) counts as
:data:`UNKNOWN_FILE_S`, so it starts early rather than last.  Only the order changes: every file
still runs whole on one worker, and which tests run is the same.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

DURATIONS = Path(__file__).with_name("suite_durations.json")
# A file the table does not know: above most files (the median is a few seconds), so a new slow
# file is not left for the end; a new fast one costs nothing by starting early.
UNKNOWN_FILE_S = 30.0
# Files whose tests share one package-scoped fixture of real processes: the three scripted
# replicas behind HAProxy of tests/cluster/conftest.py (``cluster``).  pytest keeps a package's
# fixture only while consecutive tests are in that package, so as separate work units these
# files each started their own cluster on whichever worker took them (3 ``serve`` starts and an
# HAProxy each).  One unit: one worker runs them one after another, on one cluster, as
# ``TEST_WORKERS=0`` always did.  tests/test_suite_schedule.py checks that the list names every
# file taking the fixture.
SHARED_FIXTURE_UNITS: dict[str, str] = {
    path: "tests/cluster/conftest.py::cluster"
    for path in ("tests/cluster/test_balancer.py", "tests/cluster/test_responses_cancel.py",
                 "tests/cluster/test_tenancy.py")
}


def file_weights(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test file (path from the repository root), from the recorded table."""
    try:
        return {name: float(seconds) for name, seconds in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


class LongestFileFirstScheduling(LoadFileScheduling):
    """``--dist loadfile`` with its queue sorted by recorded file duration, longest first."""

    def __init__(self, config: pytest.Config, log: Any = None,
                 weights: dict[str, float] | None = None) -> None:
        super().__init__(config, log)
        self.weights = file_weights() if weights is None else weights
        self._sorted = False

    def weight(self, scope: str) -> float:
        """The recorded seconds of a work unit: a file, or the files of a shared fixture."""
        members = [f for f, unit in SHARED_FIXTURE_UNITS.items() if unit == scope] or [scope]
        return sum(self.weights.get(f.replace("\\", "/"), UNKNOWN_FILE_S) for f in members)

    def _split_scope(self, nodeid: str) -> str:
        # A file, or the unit of the files sharing a package fixture (SHARED_FIXTURE_UNITS).
        scope = super()._split_scope(nodeid)
        return SHARED_FIXTURE_UNITS.get(scope.replace("\\", "/"), scope)

    def _assign_work_unit(self, node: Any) -> None:
        # The base class fills ``workqueue`` (ordered by test count) just before the first
        # assignment; sort it once there, stably, so equal weights keep their order.
        if not self._sorted:
            self.workqueue = OrderedDict(sorted(self.workqueue.items(),
                                                key=lambda item: -self.weight(item[0])))
            self._sorted = True
        super()._assign_work_unit(node)


def log_report_duration(report: pytest.TestReport) -> None:
    """With ``AFM_STRUCT_SUITE_LOG=PATH`` set: append ``file<TAB>phase<TAB>seconds`` for each test
    phase as it ends (the controller's view under xdist), so a run cut short still has its
    weights (``python -m tests.suite_schedule --log PATH`` sums them)."""
    path = os.environ.get("AFM_STRUCT_SUITE_LOG")
    if path:
        with open(path, "a") as out:
            out.write(f"{report.nodeid.split('::', 1)[0]}\t{report.when}\t{report.duration:.3f}\n")


def durations_from_log(log_path: Path) -> dict[str, float]:
    """Seconds per test file from an ``AFM_STRUCT_SUITE_LOG`` file."""
    totals: dict[str, float] = defaultdict(float)
    for line in log_path.read_text().splitlines():
        file, _phase, seconds = line.split("\t")
        totals[file] += float(seconds)
    return {name: round(seconds, 1) for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])}


def durations_from_junit(xml_path: Path) -> dict[str, float]:
    """Seconds per test file from a pytest JUnit XML report (the sum of its test cases' times,
    setup and teardown included), rounded to a tenth."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        file = case.get("file") or classname_to_file(classname)
        totals[file] += float(case.get("time") or 0.0)
    return {name: round(seconds, 1) for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])}


def classname_to_file(classname: str) -> str:
    """``tests.server.test_x.TestY`` -> ``tests/server/test_x.py`` (the first ``test_*`` part
    names the module; classes follow it)."""
    parts = classname.split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: i + 1]) + ".py"
    return "/".join(parts) + ".py"


def main(argv: list[str]) -> int:
    """``python -m tests.suite_schedule REPORT.xml`` (or ``--log PATH``): rewrite
    suite_durations.json from a run."""
    if len(argv) == 2 and argv[0] == "--log":
        table = durations_from_log(Path(argv[1]))
    elif len(argv) == 1:
        table = durations_from_junit(Path(argv[0]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    DURATIONS.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{len(table)} files, {sum(table.values()):.0f} s in all -> {DURATIONS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
