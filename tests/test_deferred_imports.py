"""jsonschema's iri checks without rfc3987_syntax's Earley grammar built at import
(afm_struct/deferred_imports.py): a fresh process, as the server and every CLI command start."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import afm_struct, jsonschema
from jsonschema import Draft7Validator, Draft202012Validator
before = "rfc3987_syntax.syntax_helpers" in sys.modules
checks = [V.FORMAT_CHECKER.conforms(v, f) for V in (Draft7Validator, Draft202012Validator)
          for v, f in (("http://a/b?c#d", "iri"), ("a b", "iri"), ("http://\u00e9x.fr/\u00fc", "iri"),
                       ("#frag", "iri-reference"), ("\\\\bad", "iri-reference"))]
import rfc3987_syntax
print(json.dumps({"before": before, "checks": checks,
                  "after": "rfc3987_syntax.syntax_helpers" in sys.modules,
                  "parse": type(rfc3987_syntax.parse("iri", "http://a/")).__name__}))
"""


def test_iri_formats_are_checked_and_the_grammar_is_built_only_when_first_used() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["before"] is False  # importing jsonschema built no grammar
    assert seen["checks"] == [True, False, True, True, False] * 2  # the real validator's verdicts
    assert seen["after"] is True and seen["parse"] == "Tree"  # the real module behind the stand-in
