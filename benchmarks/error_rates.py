"""Error rates of the report's statistics by simulation, at the study's design (5 pretraining seeds x
3 fine-tuning seeds x 1,000 test examples): the verdict rule (the variance-components t interval,
:func:`tasks.report.statistics.compare`) against the percentile Multi-Bootstrap and a bootstrap over
one checkpoint pair's test examples, with test-sample noise dominating and with pretraining-seed
noise dominating (each design's measured variance shares are written beside its rows, so that its
name can be checked), and at 2 pretraining seeds (where the verdict rule gives no verdict and no MDE, but
its interval must still keep its false-positive rate): false positives under no effect, coverage of a
known effect, realised power at the reported MDE.

Usage: python benchmarks/error_rates.py [--comparisons 1000] [--bootstrap-comparisons 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from tasks.report.simulation import Design, effect_for, error_rates
from tasks.report.statistics import compare, example_bootstrap, multibootstrap
from tasks.report.variance import decompose

sys.path.insert(0, str(Path(__file__).parent))
from results import write_results  # noqa: E402  (benchmarks/results.py)

DESIGNS = {"test examples dominate": Design(seed_sd=0.03, finetune_sd=0.02),
           "pretraining seeds dominate": Design(seed_sd=0.3, finetune_sd=0.1),
           "2 pretraining seeds x 1 fine-tuning seed": Design(seeds=2, finetune_seeds=1, seed_sd=0.05,
                                                             finetune_sd=0.02)}


def shares(design: Design, draws: int = 20) -> dict:
    """A design's mean variance shares of one run's score (:func:`tasks.report.variance.decompose`)."""
    rng = np.random.default_rng(0)
    parts = [decompose(design.draw(rng)[0]).shares for _ in range(draws)]
    return {k: _finite(round(float(np.nanmean([p[k] for p in parts])), 3)) for k in parts[0]}


def _finite(x: float) -> float | None:
    """``x``, or None where the design gives no value (e.g. no MDE under 3 replicates): JSON has no NaN."""
    return x if np.isfinite(x) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--comparisons", type=int, default=1000)
    ap.add_argument("--bootstrap-comparisons", type=int, default=300)
    ap.add_argument("--draws", type=int, default=200, help="bootstrap resamples per comparison")
    args = ap.parse_args()
    figures = {}
    for name, design in DESIGNS.items():
        t0 = time.perf_counter()
        methods = {"verdict rule (t interval)": (compare, args.comparisons),
                   "Multi-Bootstrap (percentile)": (lambda a, b: multibootstrap(a, b, draws=args.draws),
                                                    args.bootstrap_comparisons),
                   "one checkpoint pair, examples only": (lambda a, b: example_bootstrap(a, b, draws=args.draws),
                                                          args.bootstrap_comparisons)}
        rows = {}
        for method, (fn, n) in methods.items():
            null = error_rates(design, fn, n, seed=1)
            known = error_rates(design, fn, n, effect=0.2, seed=2)
            rows[method] = {"false_positive_rate": null["rejected"], "coverage_under_no_effect": null["covered"],
                            "coverage_under_an_effect": known["covered"],
                            "median_mde_points": _finite(100 * null["median_mde"]),
                            "comparisons": n}
        mde = rows["verdict rule (t interval)"]["median_mde_points"]
        if mde is not None:  # realised power at the MDE the rule reports (none under too few replicates)
            power = error_rates(design, compare, args.comparisons, effect=effect_for(design, mde / 100), seed=3)
            rows["verdict rule (t interval)"]["power_at_the_mde"] = power["rejected"]
        figures[name] = {**rows, "variance_shares": shares(design)}
        print(f"{name} ({time.perf_counter() - t0:.0f} s):")
        for method, r in rows.items():
            print(f"  {method}: {r}")
    write_results("error_rates", {"design": "5 pretraining seeds x 3 fine-tuning seeds x 1,000 examples, accuracy "
                                           "(but the 2-seed design)",
                                 "draws": args.draws, "alpha": 0.05}, figures)


if __name__ == "__main__":
    main()
