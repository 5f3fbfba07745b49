"""Totals of a full `bench masks` report with some schemas' rows replaced by a later run's.

    python benchmarks/masks/anyorder_merge.py FULL.json SUBSET.json

Counts as `bench masks` does: schemas served enforced, and among them the schemas with at least
one validation (valid instance rejected) / invalidation (invalid instance accepted) error.
"""

import gzip
import json
import sys

full, sub = (json.load(gzip.open(p) if p.endswith('.gz') else open(p)) for p in sys.argv[1:3])
per = {p["file"]: p for p in full["per_schema"]}
for p in sub["per_schema"]:
    old = per[p["file"]]
    if (old["status"], old.get("reason")) != (p["status"], p.get("reason")):
        print("changed", p["file"], old["status"], old.get("reason"), "->", p["status"], p.get("reason"))
    per[p["file"]] = p
enforced = [p for p in per.values() if p["status"] == "enforced"]
val = sum(p.get("validation_errors", 0) > 0 for p in enforced)
inval = sum(p.get("invalidation_errors", 0) > 0 for p in enforced)
share = 100 * len(enforced) / len(per)
print(f"enforced {len(enforced)}/{len(per)} ({share:.2f} %), validation errors {val} "
      f"({100 * val / len(enforced):.2f} % of enforced), invalidation errors {inval}")
