"""Check gtcontrol's certificates against an independent extended-precision computation.

Plain script: ``python benchmarks/verify_certificates.py [N] [SEED]`` (default 240 cases, seed 0).

Generates ``N`` planted-equilibrium cases of the Riccati class (d = 2…6; repelling, attracting
and saddle equilibria; starts exactly on the equilibrium, within 1e-15…1e-3 of it, and random
SPD starts; tests/_planted.py), runs ``blowup_analysis`` and ``analyze`` on each, and checks every
certified claim with mpmath at 50 digits on the very same float inputs. Prints one line per
contradicted case and a table by start distance: how many answers carry a certificate, how many
are "undetermined at double precision", and how many certificates are contradicted (must be 0).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import Counter

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from _planted import check_case, default_cases


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 240
    seed = int(argv[2]) if len(argv) > 2 else 0
    t0 = time.perf_counter()
    by_dist: dict[str, Counter[str]] = {}
    bad = 0
    for case in default_cases(n, seed):
        chk = check_case(case)
        key = "random" if math.isnan(case.distance) else f"{case.distance:.0e}"
        row = by_dist.setdefault(key, Counter())
        row["cases"] += 1
        row["certified"] += chk.certified
        row["undetermined"] += bool(chk.blowup.stats.get("undetermined"))
        if chk.contradicted:
            bad += 1
            row["contradicted"] += 1
            print(f"CONTRADICTED {case.name}: {chk.contradicted}", flush=True)
    head = ("start distance", "cases", "certified", "undetermined", "contradicted")
    print(f"{head[0]:>15} {head[1]:>6} {head[2]:>10} {head[3]:>13} {head[4]:>13}")
    for key in sorted(by_dist, key=lambda k: -1.0 if k == "random" else float(k), reverse=True):
        row = by_dist[key]
        print(
            f"{key:>15} {row['cases']:>6} {row['certified']:>10} {row['undetermined']:>13} "
            f"{row['contradicted']:>13}"
        )
    print(f"{n} cases, {bad} contradicted, {time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
