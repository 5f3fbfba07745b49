"""The grammar fuzzer: hostile constraints against raw llguidance and against our compile path.

Each case (tests/fuzz/grammar_strategies.py) goes to two child processes
(tests/fuzz/grammar_child.py): raw llguidance, where a native crash shows up as the child's
signal (SIGSEGV, SIGABRT) rather than taking the fuzzer down, and our ``compile_constraint``,
which must never crash or hang whatever the raw engine does (the number guard,
afm_struct/grammar/engines/llguidance_numbers.py, sits in front of every llguidance compile).  A crashed
child is restarted and the next case goes on.

    python -m tests.fuzz.grammar_fuzz 2000 [findings.jsonl]   # make fuzz-grammar: a survey
    pytest tests/fuzz/test_grammar_fuzz.py          # the CI-sized run (make test)
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CASE_TIMEOUT_S = 20.0  # a compile past this is a hang (ours bound compiles at 10 s)


class GrammarChild:
    """One child compiling cases in ``mode`` (``raw`` or ``ours``); restarted after a crash."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ)
        if self.mode == "raw":  # the engine alone: no BLAS needed
            env.pop("LD_PRELOAD", None)
        proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.grammar_child", self.mode], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, env=env)
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"the {self.mode} child did not start (exit {proc.poll()})")
        return proc

    def run(self, kind: str, text: str, timeout_s: float = CASE_TIMEOUT_S) -> dict[str, Any]:
        """The child's verdict on one case: ``ok`` / ``refused`` / ``error`` from the child,
        ``crash`` (with the signal) when it died, ``hang`` when it took over ``timeout_s``."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps([kind, text]) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died(proc)
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        if not ready:
            self.stop()
            return {"status": "hang", "detail": f"over {timeout_s:.0f} s"}
        line = proc.stdout.readline()
        if not line:
            return self._died(proc)
        return json.loads(line)

    def _died(self, proc: subprocess.Popen[str]) -> dict[str, Any]:
        code = proc.wait(timeout=10)
        self.proc = None
        name = signal.Signals(-code).name if code < 0 else f"exit {code}"
        return {"status": "crash", "detail": name}

    def stop(self) -> None:
        """Stop the child (this runner's own, by its pid)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


@dataclass
class Finding:
    """A case on which the raw engine or our compile path crashed, hung or failed."""

    kind: str
    text: str
    raw: dict[str, Any]
    ours: dict[str, Any]


@dataclass
class Survey:
    """Counts by (kind, raw status, our status), and the findings."""

    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)

    def add(self, kind: str, text: str, raw: dict[str, Any], ours: dict[str, Any]) -> None:
        self.counts[(kind, raw["status"], ours["status"])] += 1
        if raw["status"] in ("crash", "hang") or ours["status"] in ("crash", "hang", "error"):
            self.findings.append(Finding(kind, text, raw, ours))

    def report(self) -> str:
        lines = ["kind   raw        ours       cases"]
        lines += [f"{k:<6} {r:<10} {o:<10} {n}" for (k, r, o), n in sorted(self.counts.items())]
        for f in self.findings:
            lines.append(f"FINDING {f.kind}: raw {f.raw['status']} ({f.raw['detail'][:60]}), ours "
                         f"{f.ours['status']} ({f.ours['detail'][:80]}): {f.text[:200]}")
        return "\n".join(lines)


def survey(n: int, *, derandomize: bool = False) -> Survey:
    """``n`` cases drawn from the strategies, each through both children."""
    from hypothesis import HealthCheck, given, settings

    from .grammar_strategies import cases

    raw, ours, result = GrammarChild("raw"), GrammarChild("ours"), Survey()

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              derandomize=derandomize)
    @given(case=cases())
    def one(case: tuple[str, str]) -> None:
        kind, text = case
        result.add(kind, text, raw.run(kind, text), ours.run(kind, text))

    try:
        one()
    finally:
        raw.stop()
        ours.stop()
    return result


def explained(finding: Finding) -> bool:
    """True when the number guard names a crash in a case that crashed the raw engine (for a
    Lark grammar, in one of its ``%json`` blocks): the crash is of a class it knows."""
    from afm_struct.grammar.engines.llguidance_numbers import lark_json_issues, number_issues

    if finding.kind == "json":
        issues = number_issues(json.loads(finding.text))
    else:
        issues = [issue for _, issue in lark_json_issues(finding.text)]
    return any(issue.kind == "crash" for issue in issues)


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    findings_path = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    start = time.perf_counter()
    result = survey(n)
    print(result.report())
    crashes = [f for f in result.findings if f.raw["status"] == "crash"]
    print(f"raw crashes: {len(crashes)}, of a class the guard knows: {sum(map(explained, crashes))}")
    if findings_path is not None:
        findings_path.write_text("".join(json.dumps(f.__dict__) + "\n" for f in result.findings))
    print(f"{n} cases in {time.perf_counter() - start:.0f} s")
    # Ours must never crash, hang or fail unexpectedly; the raw engine's crashes are findings.
    return 1 if any(f.ours["status"] in ("crash", "hang", "error") for f in result.findings) else 0


if __name__ == "__main__":
    sys.exit(main())
