"""Statements about pretraining *procedures*, not checkpoints: intervals, tests and the minimum
detectable effect over pretraining seeds x fine-tuning seeds x test examples.

A procedure (an objective, random init, a published checkpoint) is run as ``S`` pretraining
seeds, each fine-tuned with ``F`` fine-tuning seeds, each scored on the same ``N`` test
examples. Its outcomes are per-example counts ``c[s, f, n, k]`` (:class:`Outcomes`): a metric
is a function of their sums over examples (accuracy: correct and total; entity-level F1: true
positives, predictions, gold entities), so a metric that is not a mean over examples is
recomputed from resampled counts, never averaged per example.

Two ways to judge a difference ``δ = θ_A − θ_B`` of procedure means (``θ``: the metric averaged
over seeds):

* **The Multi-Bootstrap** (Sellam et al. 2022, MultiBERTs, ICLR, §3 and appendix): ``B`` joint
  resamples of pretraining seeds, fine-tuning seeds (within each) and test examples, the metric
  recomputed on each; paired when both procedures share seeds (the same draw for both) and
  always paired over examples. The percentile interval and the two-sided bootstrap p-value.
  :func:`multibootstrap`.
* **The variance-components t interval** (:func:`compare`, the report's rule): the metric
  linearised into per-example pseudo-values (its first-order expansion around each run's totals,
  whose mean is the run's metric), then
  ``Var(δ̂) = V_seed + V_example − V_residual``: the variance of the pretraining-seed means over
  ``S`` (pretraining and fine-tuning seed noise), plus that of the example means over ``N``
  (test-sample noise), minus the residual noise both contain once too many (the unbiased
  variance of a grand mean in a crossed models x examples design), with Welch-Satterthwaite
  degrees of freedom and a t interval. Joint resampling counts the residual noise twice (it
  errs conservative when example noise dominates), and a percentile interval over 5 seeds is too
  narrow when seed noise dominates (the bootstrap variance of a mean of ``S`` is ``(S−1)/S`` of
  its variance and its quantiles are normal, not t with ``S − 1`` degrees of freedom); this one
  corrects both. ``tests/test_statistics.py`` measures either's error rates by simulation
  (:mod:`tasks.report.simulation`).

The verdict is *better* or *worse* when the 95% interval excludes 0, else *within noise* (and *too
few replicates* under 3 of them, *n/a* under 2 test examples); the **minimum detectable effect**
(:func:`mde`) is the difference this design detects with 80% power at α = 0.05, from the
noncentral t distribution of the test's statistic and a median-unbiased estimate of the standard error
from the replicates at hand. With one pretraining seed the interval is about that
checkpoint, not the procedure (the fine-tuning seeds are then the replicates); with one of each,
about that one run, over test examples only. :func:`tasks.report.variance.decompose` splits a procedure's
run-to-run variance into its pretraining-seed, fine-tuning-seed and test-sample shares.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import stats
from scipy.optimize import brentq

ALPHA, POWER = 0.05, 0.80
MIN_REPLICATES = 3  # fewer pretraining (or fine-tuning) seeds give no verdict

Metric = Callable[[np.ndarray], np.ndarray]
"""``metric(sums[..., k]) -> values[...]``: a metric from the per-example counts summed over examples."""


def mean_of(column: int = 0, total: int = 1, scale: float = 1.0) -> Metric:
    """A mean over examples (accuracy, exact match, MRC F1): ``scale · Σ c[column] / Σ c[total]``."""
    return lambda sums: scale * sums[..., column] / np.maximum(sums[..., total], 1e-300)


def f1_of(tp: int = 0, predicted: int = 1, gold: int = 2, scale: float = 1.0) -> Metric:
    """Micro F1 from counts: ``2 TP / (predicted + gold)`` (0 when both are 0): entity-level NER F1,
    the positive class's F1 of a binary classifier."""
    return lambda sums: scale * 2 * sums[..., tp] / np.maximum(sums[..., predicted] + sums[..., gold], 1e-300)


def macro_f1_of(classes: int, scale: float = 1.0) -> Metric:
    """The mean over ``classes`` of each class's F1, from counts laid out ``[TP, predicted, gold]``
    per class (``k = 3 · classes``)."""
    def metric(sums: np.ndarray) -> np.ndarray:
        s = sums.reshape(*sums.shape[:-1], classes, 3)
        return scale * (2 * s[..., 0] / np.maximum(s[..., 1] + s[..., 2], 1e-300)).mean(-1)
    return metric


@dataclass(frozen=True)
class Outcomes:
    """One procedure's runs on one task: ``counts[s, f, n, k]`` for pretraining seed ``s``,
    fine-tuning seed ``f`` and test example ``n`` (the same examples, in the same order, for every
    run), with the seeds' names (``seeds``: pretraining, ``finetune_seeds``) to pair procedures."""

    counts: np.ndarray
    metric: Metric
    seeds: tuple = (0,)
    finetune_seeds: tuple = (0,)

    def __post_init__(self):
        if self.counts.ndim != 4 or self.counts.shape[:2] != (len(self.seeds), len(self.finetune_seeds)):
            raise ValueError(f"counts {self.counts.shape} do not match {len(self.seeds)} pretraining seeds x "
                             f"{len(self.finetune_seeds)} fine-tuning seeds x examples x counts")

    @property
    def runs(self) -> np.ndarray:
        """``[S, F]``: each run's metric on the whole test set."""
        return self.metric(self.counts.sum(axis=2))

    @property
    def estimate(self) -> float:
        """The procedure's mean: its runs' metrics averaged over both seeds."""
        return float(self.runs.mean())

    def pseudo_values(self) -> np.ndarray:
        """``[S, F, N]`` per-example values whose mean over ``N`` is each run's metric: the metric's
        first-order expansion around the run's totals ``T`` (``g(T) + ∇g(T) · (N c_n − T)``),
        exactly the per-example values for a mean over examples."""
        n = self.counts.shape[2]
        totals = self.counts.sum(axis=2)  # [S, F, k]
        grad = _gradient(self.metric, totals)  # [S, F, k]
        return self.metric(totals)[..., None] + np.einsum("sfk,sfnk->sfn", grad, n * self.counts - totals[:, :, None])


def _gradient(metric: Metric, totals: np.ndarray) -> np.ndarray:
    """``∂ metric / ∂ totals`` by central differences (the metrics are rational functions of counts)."""
    k = totals.shape[-1]
    step = np.maximum(np.abs(totals), 1.0) * 1e-6
    grad = np.empty_like(totals, dtype=np.float64)
    for i in range(k):
        up, down = totals.astype(np.float64).copy(), totals.astype(np.float64).copy()
        up[..., i] += step[..., i]
        down[..., i] -= step[..., i]
        grad[..., i] = (metric(up) - metric(down)) / (2 * step[..., i])
    return grad


@dataclass(frozen=True)
class Comparison:
    """``A − B`` on one task: the mean difference, its 95% interval, two-sided p-value, standard
    error, degrees of freedom, minimum detectable effect and verdict, and what it is about."""

    difference: float
    low: float
    high: float
    p_value: float
    se: float
    df: float
    mde: float
    paired_seeds: bool
    replicates: str
    """``pretraining seeds``, ``fine-tuning seeds`` (one pretraining seed: about that checkpoint)
    or ``test examples`` (one run: about that run)."""
    count: int = 0
    """How many replicates the interval rests on (the larger side's; test examples for one run)."""

    @property
    def verdict(self) -> str:
        """``better`` / ``worse`` when the interval excludes 0, else ``within noise``; ``n/a`` without an
        interval (fewer than 2 test examples) and ``too few replicates`` under :data:`MIN_REPLICATES`
        (a variance from 2 seeds has 1 degree of freedom: its interval is valid but nearly useless,
        and a floored one can still read as a finding)."""
        if not np.isfinite(self.low) or not np.isfinite(self.high):
            return "n/a"
        if self.count < MIN_REPLICATES:
            return "too few replicates"
        return "better" if self.low > 0 else "worse" if self.high < 0 else "within noise"

    @property
    def withheld(self) -> bool:
        """No verdict (``too few replicates``, ``n/a``): then the report prints the difference alone, with
        no interval, p-value or MDE (from 2 replicates an interval still excluded 0 in 7-8.5% of null
        comparisons and the MDE had 56% power: printed, they would read as the finding withheld)."""
        return self.verdict in ("too few replicates", "n/a")


def _level(o: Outcomes) -> tuple[np.ndarray, str]:
    """The replicate means of a procedure: per pretraining seed when there are several, else per
    fine-tuning seed, else the one run."""
    runs = o.runs
    if runs.shape[0] > 1:
        return runs.mean(axis=1), "pretraining seeds"
    if runs.shape[1] > 1:
        return runs[0], "fine-tuning seeds"
    return runs.reshape(1), "test examples"


def residual_mean_square(x: np.ndarray) -> float:
    """The residual mean square of the runs x examples table ``x[m, n]`` (two-way, no replication)."""
    m, n = x.shape
    if m < 2 or n < 2:
        return 0.0
    r = x - x.mean(1, keepdims=True) - x.mean(0, keepdims=True) + x.mean()
    return float((r ** 2).sum() / ((m - 1) * (n - 1)))


def _level_table(x: np.ndarray) -> np.ndarray:
    """``[L, N]``: the pseudo-values ``x[s, f, n]`` averaged to the replicate level of :func:`_level`
    (pretraining-seed means when there are several seeds, else the fine-tuning seeds' runs, else
    the one run). Its residual is the replicates' own example noise; the runs' table would add the
    fine-tuning seeds' share of the checkpoint x example interaction once more (E[SE²]/Var 1.17-1.28
    at 1-1.5 logits of example spread, against 1.03 from this table)."""
    s, f, n = x.shape
    return x.mean(axis=1) if s > 1 else x[0] if f > 1 else x.reshape(1, n)


def _df(terms: list[tuple[float, float]], variance: float) -> float:
    """Welch-Satterthwaite degrees of freedom of ``variance`` from its ``(variance, df)`` terms."""
    terms = [(v, d) for v, d in terms if v > 0 and np.isfinite(d) and d > 0]
    return float(min(max(variance ** 2 / sum(v ** 2 / d for v, d in terms), 1.0), 1e6)) if terms else 1e6


def compare(a: Outcomes, b: Outcomes, alpha: float = ALPHA) -> Comparison:
    """``a − b`` with the variance-components t interval (module docstring).

    Paired over pretraining (and fine-tuning) seeds when both procedures name the same seeds
    (then the seed-level variance is that of the paired differences); always paired over test
    examples. The variance is floored at the larger of its seed-level and example-level terms
    (a method-of-moments estimate can come out at or below 0 with few replicates, which would give
    a zero-width interval and a forced verdict); the residual term enters the degrees of freedom.
    Fewer than 2 test examples, or no variation at all (every run and example differ alike: nothing to
    scale an effect by), leave no interval (NaN, verdict ``n/a``); under :data:`MIN_REPLICATES` the MDE
    is NaN (from 1 degree of freedom it had 56% power, not 80%: ``benchmarks/error_rates.py``).

    Raises:
        ValueError: the two do not score the same number of test examples.
    """
    if a.counts.shape[2] != b.counts.shape[2]:
        raise ValueError(f"different test sets: {a.counts.shape[2]} and {b.counts.shape[2]} examples")
    diff, n = a.estimate - b.estimate, a.counts.shape[2]
    paired = a.seeds == b.seeds and a.finetune_seeds == b.finetune_seeds
    la, what = _level(a)
    lb, what_b = _level(b)
    count = max(len(la), len(lb)) if max(len(la), len(lb)) > 1 else n
    if n < 2:
        nan = float("nan")
        return Comparison(diff, nan, nan, nan, nan, nan, nan, paired, "test examples", count)
    xa, xb = a.pseudo_values(), b.pseudo_values()
    if paired:
        d = la - lb
        v_seed, df_seed = (d.var(ddof=1) / len(d), len(d) - 1) if len(d) > 1 else (0.0, np.inf)
        table_d = _level_table(xa - xb)
        residual = residual_mean_square(table_d) / table_d.size
        df_residual = (table_d.shape[0] - 1) * (n - 1)
    else:
        parts = [(lv.var(ddof=1) / len(lv), len(lv) - 1) for lv in (la, lb) if len(lv) > 1]
        v_seed = sum(v for v, _ in parts)
        df_seed = v_seed ** 2 / sum(v ** 2 / d for v, d in parts) if parts and v_seed > 0 else np.inf
        what = what if len(la) >= len(lb) else what_b
        tables = [_level_table(x) for x in (xa, xb)]
        residual = sum(residual_mean_square(t) / t.size for t in tables)
        df_residual = sum((t.shape[0] - 1) * (n - 1) for t in tables)
    # the example means, averaged over every run of each procedure: test-sample noise
    e = xa.mean(axis=(0, 1)) - xb.mean(axis=(0, 1))
    v_example, df_example = e.var(ddof=1) / len(e), len(e) - 1
    variance = max(v_seed + v_example - residual, v_seed, v_example)
    df = _df([(v_seed, df_seed), (v_example, df_example), (residual, df_residual)], variance)
    what = what if (la.size > 1 or lb.size > 1) else "test examples"
    return _t_comparison(diff, float(np.sqrt(variance)), df, paired, what, count, alpha)


def _t_comparison(diff: float, se: float, df: float, paired: bool, replicates: str, count: int,
                  alpha: float) -> Comparison:
    """The t interval, p-value and MDE of ``diff`` with standard error ``se`` on ``df`` degrees of freedom;
    all NaN when ``se`` is 0, the MDE NaN under :data:`MIN_REPLICATES` (see :func:`compare`)."""
    if not se > 0:
        nan = float("nan")
        return Comparison(diff, nan, nan, nan, se, df, nan, paired, replicates, count)
    t = stats.t.ppf(1 - alpha / 2, df) if np.isfinite(df) else stats.norm.ppf(1 - alpha / 2)
    p = float(2 * stats.t.sf(abs(diff) / se, df))
    detectable = mde(se, df, alpha) if count >= MIN_REPLICATES else float("nan")
    return Comparison(diff, diff - t * se, diff + t * se, p, se, df, detectable, paired, replicates, count)


def mde(se: float, df: float, alpha: float = ALPHA, power: float = POWER, estimated_df: float | None = None) -> float:
    """The minimum detectable effect: the true difference a two-sided t test at level ``alpha`` with
    ``df`` degrees of freedom rejects with probability ``power``, when ``se`` (same units) is the standard
    error estimated from the replicates at hand, with ``estimated_df`` degrees of freedom (default ``df``:
    the test's own; a planned design's SE comes from the components of the study at hand, with its df).

    Two steps. The noncentral t distribution of the test's statistic gives the effect, in units of the
    *true* standard error σ, that is rejected with ``power`` (its spread includes the noise of the
    estimated SE: with the ~4 degrees of freedom of 5 seeds, ``(t_{1−α/2} + t_{power}) · SE`` falls short).
    Then σ is estimated from ``se`` median-unbiasedly: ``se² · df / σ²`` is χ²(df), so ``σ̂ = se ·
    sqrt(df / median χ²(df))`` (1.09 ``se`` at 4 df, 1.20 at 2): the plug-in ``se`` is below σ in more than
    half of the studies, and its MDE had about 75% power at 5 seeds and 70% at 3 (simulated). So the reported
    MDE is the true one in median: a true difference of the median reported MDE is detected with 80% power
    (``tests/test_statistics.py``, by simulation, within its Monte-Carlo error)."""
    if not (np.isfinite(se) and se > 0):
        return float("nan") if not np.isfinite(se) else 0.0
    if df > 1000:  # the noncentral t is the normal there (and scipy's nct loses precision), σ known
        return float((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * se)
    critical = stats.t.ppf(1 - alpha / 2, df)

    def shortfall(ncp: float) -> float:  # scipy's nct is NaN far in its tails: there the upper tail is 1, the lower 0
        upper, lower = stats.nct.sf(critical, df, ncp), stats.nct.cdf(-critical, df, ncp)
        return float(np.nan_to_num(upper, nan=1.0) + np.nan_to_num(lower, nan=0.0)) - power

    high = critical + stats.norm.ppf(power) + 1.0
    while shortfall(high) < 0:
        high *= 2
    k = df if estimated_df is None else estimated_df
    sigma = se * np.sqrt(k / stats.chi2.ppf(0.5, k)) if np.isfinite(k) and k <= 1000 else se
    return float(brentq(shortfall, 0.0, high) * sigma)


def multibootstrap(a: Outcomes, b: Outcomes, draws: int = 1000, seed: int = 0,
                   alpha: float = ALPHA) -> Comparison:
    """``a − b`` by the Multi-Bootstrap (module docstring): each of ``draws`` resamples draws the
    test examples (multinomial weights, shared by both procedures), the pretraining seeds and,
    within each, the fine-tuning seeds (shared when the procedures share seeds), recomputes each
    run's metric from the weighted counts and averages over the drawn runs. Percentile interval;
    two-sided p-value ``2 · min(P*(δ ≤ 0), P*(δ ≥ 0))``."""
    rng = np.random.default_rng(seed)
    n = a.counts.shape[2]
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=draws).astype(np.float64)  # [B, N]
    paired = a.seeds == b.seeds and a.finetune_seeds == b.finetune_seeds

    def draw_runs(o: Outcomes, picks=None):
        runs = o.metric(np.einsum("bn,sfnk->bsfk", weights, o.counts))  # [B, S, F]
        s, f = runs.shape[1:]
        if picks is None:
            picks = rng.integers(0, s, (draws, s)), rng.integers(0, f, (draws, s, f))
        ps, pf = picks
        drawn = runs[np.arange(draws)[:, None, None], ps[:, :, None], pf]
        return drawn.mean(axis=(1, 2)), picks

    ta, picks = draw_runs(a)
    tb, _ = draw_runs(b, picks if paired else None)
    delta = ta - tb
    low, high = np.quantile(delta, [alpha / 2, 1 - alpha / 2])
    p = float(min(1.0, 2 * min((delta <= 0).mean(), (delta >= 0).mean())))
    se = float(delta.std(ddof=1))
    return Comparison(a.estimate - b.estimate, float(low), float(high), p, se, np.inf, mde(se, np.inf, alpha),
                      paired, _level(a)[1], max(len(_level(a)[0]), len(_level(b)[0])))


def example_bootstrap(a: Outcomes, b: Outcomes, draws: int = 1000, seed: int = 0, alpha: float = ALPHA) -> Comparison:
    """``a − b`` of the first run of each (one checkpoint pair, one fine-tuning seed) by a bootstrap
    over test examples alone: what a comparison of two checkpoints says when it takes them for
    the procedures (the error this module exists to avoid; the tests measure its rate)."""
    first = [Outcomes(o.counts[:1, :1], o.metric) for o in (a, b)]
    return multibootstrap(*first, draws=draws, seed=seed, alpha=alpha)


def from_runs(a: list[float], b: list[float], paired: bool, replicates: str = "fine-tuning seeds",
              alpha: float = ALPHA) -> Comparison:
    """``mean(a) − mean(b)`` of per-run scores when no per-example outcomes exist (e.g. students
    and pruned models, scored per seed only): a t interval over the paired differences (runs of
    the same seeds) or Welch's (SciPy's ``ttest_rel`` / ``ttest_ind(equal_var=False)``). Test-sample noise is in
    each run's score but not apart from it; runs without spread give no interval (NaN).

    Raises:
        ValueError: fewer than 2 runs on a side (nothing to estimate a variance from), or paired
            runs of different counts.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if paired and (len(a) != len(b) or len(a) < 2):
        raise ValueError(f"paired runs need the same count, at least 2: {len(a)} and {len(b)}")
    if min(len(a), len(b)) < 2:
        raise ValueError(f"at least 2 runs a side: {len(a)} and {len(b)}")
    diff, count = float(a.mean() - b.mean()), max(len(a), len(b))
    with warnings.catch_warnings():  # runs without spread: no interval (NaN), as compare()
        warnings.simplefilter("ignore", RuntimeWarning)
        test = stats.ttest_rel(a, b) if paired else stats.ttest_ind(a, b, equal_var=False)
    if not np.isfinite(test.statistic):
        return _t_comparison(diff, 0.0, float(test.df), paired, replicates, count, alpha)
    interval = test.confidence_interval(1 - alpha)
    se = float((interval.high - interval.low) / (2 * stats.t.ppf(1 - alpha / 2, test.df)))
    detectable = mde(se, float(test.df), alpha) if count >= MIN_REPLICATES else float("nan")
    return Comparison(diff, float(interval.low), float(interval.high), float(test.pvalue), se, float(test.df),
                      detectable, paired, replicates, count)


def two_proportions(right_a: int, total_a: int, right_b: int, total_b: int, alpha: float = ALPHA) -> Comparison:
    """``right_a / total_a − right_b / total_b`` (e.g. two checkpoints' held-out MLM accuracies, in
    percentage points) with the Agresti-Caffo interval (Agresti & Caffo 2000, The American Statistician
    54(4)): one success and one failure added to each side before the Wald interval, so two accuracies of
    0 (or 1) keep a width, where the Wald interval would be ``[0, 0]``, and its coverage near 0 stays
    close to nominal. Unpaired (conservative when both score the same predictions); its replicates are
    the predictions, so its MDE is the normal one.

    Raises:
        ValueError: a side with no predictions, or more right than total.
    """
    if min(total_a, total_b) < 1 or not (0 <= right_a <= total_a and 0 <= right_b <= total_b):
        raise ValueError(f"proportions need 0 <= right <= total, total >= 1: {right_a}/{total_a}, {right_b}/{total_b}")
    adjusted = [((x + 1) / (n + 2), n + 2) for x, n in ((right_a, total_a), (right_b, total_b))]
    centre = 100 * (adjusted[0][0] - adjusted[1][0])
    se = 100 * float(np.sqrt(sum(q * (1 - q) / m for q, m in adjusted)))
    z = stats.norm.ppf(1 - alpha / 2)
    return Comparison(100 * (right_a / total_a - right_b / total_b), centre - z * se, centre + z * se,
                      float(2 * stats.norm.sf(abs(centre) / se)), se, np.inf, mde(se, np.inf, alpha), False,
                      "test examples", min(total_a, total_b))


def interval(o: Outcomes, alpha: float = ALPHA) -> Comparison:
    """The procedure mean of ``o`` with its 95% interval (:func:`compare` against nothing)."""
    zero = Outcomes(np.zeros_like(o.counts[..., :1]), lambda sums: np.zeros(sums.shape[:-1]), o.seeds,
                    o.finetune_seeds)
    return compare(o, zero, alpha)
