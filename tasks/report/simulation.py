"""A simulated seed study, to measure an interval method's error rates: how often its 95% interval
excludes 0 when there is no effect (false positives) and covers the true difference, and its
standard error and minimum detectable effect, under a design of pretraining seeds, fine-tuning seeds
and test examples with stated variances (``tests/test_statistics.py``, ``benchmarks/error_rates.py``;
the methods: :mod:`tasks.report.statistics`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tasks.report.statistics import Comparison, Outcomes, mean_of


def expit(x):
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class Design:
    """A simulated design: accuracy runs whose logit is ``mean + effect·[A] + a_s + b_sf + c_n``
    (``a``: pretraining seed, ``b``: fine-tuning seed, ``c``: example, all normal; the Bernoulli draw
    adds each run's own noise), ``seeds`` x ``finetune_seeds`` runs per procedure on ``examples``."""

    seeds: int = 5
    finetune_seeds: int = 3
    examples: int = 1000
    mean: float = 1.2
    seed_sd: float = 0.1
    finetune_sd: float = 0.06
    example_sd: float = 1.5

    def true_accuracy(self, effect: float = 0.0, draws: int = 2_000_000) -> float:
        """The procedure mean over the population of seeds and examples (Monte Carlo, fixed draws)."""
        rng = np.random.default_rng(12345)
        sd = np.sqrt(self.seed_sd ** 2 + self.finetune_sd ** 2 + self.example_sd ** 2)
        return float(expit(self.mean + effect + sd * rng.standard_normal(draws)).mean())

    def draw(self, rng: np.random.Generator, effect: float = 0.0, paired: bool = True) -> tuple[Outcomes, Outcomes]:
        """One comparison: procedure A (with ``effect`` on the logit scale) against B on shared examples."""
        c = self.example_sd * rng.standard_normal(self.examples)
        out = []
        for shift, names in ((effect, range(self.seeds)), (0.0, range(self.seeds) if paired else
                                                             range(100, 100 + self.seeds))):
            a = self.seed_sd * rng.standard_normal((self.seeds, 1, 1))
            b = self.finetune_sd * rng.standard_normal((self.seeds, self.finetune_seeds, 1))
            logit = self.mean + shift + a + b + c
            correct = rng.random((self.seeds, self.finetune_seeds, self.examples)) < expit(logit)
            counts = np.stack([correct, np.ones_like(correct)], axis=-1).astype(np.float64)
            out.append(Outcomes(counts, mean_of(), tuple(names), tuple(range(self.finetune_seeds))))
        return out[0], out[1]


def error_rates(design: Design, method: Callable[[Outcomes, Outcomes], Comparison], comparisons: int,
                effect: float = 0.0, paired: bool = True, seed: int = 0) -> dict:
    """Over ``comparisons`` simulated comparisons with true logit ``effect``: how often the 95%
    interval excludes 0 (the false-positive rate under no effect, the power under one) and how
    often it covers the true difference of procedure means; and the median standard error and MDE."""
    rng = np.random.default_rng(seed)
    truth = design.true_accuracy(effect) - design.true_accuracy(0.0)
    results = [method(*design.draw(rng, effect, paired)) for _ in range(comparisons)]
    return {"comparisons": comparisons, "true_difference": truth,
            "rejected": float(np.mean([r.low > 0 or r.high < 0 for r in results])),
            "covered": float(np.mean([r.low <= truth <= r.high for r in results])),
            "median_se": float(np.median([r.se for r in results])),
            "median_mde": float(np.median([r.mde for r in results]))}


def effect_for(design: Design, difference: float) -> float:
    """The logit effect whose true difference of procedure means is ``difference`` (bisection)."""
    lo, hi = 0.0, 5.0
    base = design.true_accuracy(0.0)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if design.true_accuracy(mid, 200_000) - base < difference else (lo, mid)
    return (lo + hi) / 2
