"""Run the fuzzer without hypothesis's shrinking and tally violations per family and invariant.

    python -m tests.fuzz.survey [N per family] [family ...]     (AFM_FUZZ_SEED=S: other cases)

prints the invariant table (violating responses per invariant, per family) and one example of
each (family, invariant) pair.  ``make fuzz`` runs the hypothesis test at a large example count;
this is the table the issue asks for.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from .contract import Violation
from .driver import FAMILIES, FamilyServers, Outcome, send
from .requests import FuzzCase, fuzz_cases


def draw_cases(n: int, seed: int) -> list[FuzzCase]:
    """``n`` cases drawn by hypothesis from ``seed`` (the same cases on every checkout)."""
    cases: list[FuzzCase] = []

    @hypothesis_seed(seed)
    @settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(fuzz_cases())
    def collect(case: FuzzCase) -> None:
        cases.append(case)

    collect()
    return cases[:n]


def survey(n: int, families: tuple[str, ...], seed: int = 0) -> dict[str, list[Outcome]]:
    """``n`` random requests per family; the outcomes that broke an invariant."""
    servers = FamilyServers(Path(tempfile.mkdtemp(prefix="afm-fuzz-")))
    bad: dict[str, list[Outcome]] = {f: [] for f in families}
    statuses: Counter[tuple[str, int]] = Counter()
    try:
        for family in families:
            live = servers.get(family)
            for case in draw_cases(n, seed + FAMILIES.index(family)):
                outcome = send(live, case)
                statuses[(family, outcome.status)] += 1
                if outcome.violations:
                    bad[family].append(outcome)
                    print(f"-- {outcome.report()[:1500]}", flush=True)
            print(f"{family}: {len(bad[family])} of {n} responses broke an invariant", flush=True)
    finally:
        servers.stop()
    print("statuses:", dict(statuses))
    return bad


def _key(v: Violation) -> str:
    return f"{v.invariant}(known)" if v.known else v.invariant


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 100
    families = tuple(argv[1:]) or FAMILIES
    bad = survey(n, families, int(os.environ.get("AFM_FUZZ_SEED", "0")))
    invariants = sorted({_key(v) for outs in bad.values() for o in outs for v in o.violations})
    print(f"{'family':14}" + "".join(f"{i:>12}" for i in invariants) + f"{'responses':>11}")
    for family in families:
        counts = Counter(i for o in bad[family] for i in {_key(v) for v in o.violations})
        print(f"{family:14}" + "".join(f"{counts[i]:>12}" for i in invariants) + f"{n:>11}")
    for family in families:
        shown: Counter[str] = Counter()
        for o in bad[family]:
            for v in o.violations:
                if shown[_key(v)] < 3:
                    shown[_key(v)] += 1
                    print(f"\n== {family} {_key(v)}\n{o.report()}")


if __name__ == "__main__":
    main(sys.argv[1:])
