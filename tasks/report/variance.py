"""Where a procedure's run-to-run variance comes from: its pretraining-seed, fine-tuning-seed and test-sample
components (:func:`decompose`), and the MDE of a planned design from them (:meth:`Decomposition.planned_mde`:
the report's variance table and the study planner, :mod:`tasks.report.planner`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.report.statistics import ALPHA, MIN_REPLICATES, Outcomes, mde, residual_mean_square


@dataclass(frozen=True)
class Decomposition:
    """Variance of one run's score (one pretraining seed, one fine-tuning seed, one test sample of
    ``N``), split into what each source contributes (metric units squared), and their shares;
    ``run_noise``: the part of ``test_sample`` that pairing over examples does not remove (each
    run's own example noise, the run x example interaction over ``N``), and ``examples``: ``N``."""

    pretraining_seed: float
    finetuning_seed: float
    test_sample: float
    run_noise: float = 0.0
    examples: int = 0

    def paired_variance(self, seeds: int, finetune_seeds: int, examples: int) -> float:
        """Variance of a paired comparison (same seeds, same examples) of two procedures that vary as
        this one, with ``seeds`` pretraining seeds x ``finetune_seeds`` x ``examples`` test examples: the
        examples' difficulty cancels; the rest doubles (two procedures) and shrinks with replication."""
        noise = self.run_noise * self.examples / examples  # per-example interaction over the new N
        pretraining = 0.0 if np.isnan(self.pretraining_seed) else self.pretraining_seed
        finetuning = 0.0 if np.isnan(self.finetuning_seed) else self.finetuning_seed
        return 2 * (pretraining / seeds + (finetuning + noise) / (seeds * finetune_seeds))

    def planned_mde(self, seeds: int, finetune_seeds: int, examples: int, alpha: float = ALPHA,
                    estimated_df: float | None = None) -> float:
        """The MDE of that paired comparison (:func:`mde`; degrees of freedom of its replicates, the
        pretraining seeds, else the fine-tuning seeds), these components having been estimated with
        ``estimated_df`` degrees of freedom (default: the design's). NaN under :data:`MIN_REPLICATES`
        replicates, as :func:`compare`'s. One definition for the report's variance table (at the study's
        own design) and the planner (at any), from the components of :func:`decompose`: 80% power where
        pretraining seeds matter, at least 80% where their variance is estimated at 0
        (``tests/test_statistics.py``)."""
        replicates = seeds if seeds > 1 else finetune_seeds
        if replicates < MIN_REPLICATES:
            return float("nan")
        return mde(float(np.sqrt(self.paired_variance(seeds, finetune_seeds, examples))), replicates - 1, alpha,
                   estimated_df=estimated_df)

    @property
    def shares(self) -> dict[str, float]:
        """Each component's share of their sum; NaN for a component the design cannot estimate."""
        parts = {"pretraining_seed": self.pretraining_seed, "finetuning_seed": self.finetuning_seed,
                 "test_sample": self.test_sample}
        total = sum(v for v in parts.values() if not np.isnan(v))
        return {k: (v / total if total > 0 else float("nan")) for k, v in parts.items()}


def decompose(o: Outcomes) -> Decomposition:
    """Method-of-moments variance components of a procedure's run scores (a nested ANOVA of the
    runs' metrics, fine-tuning seeds within pretraining seeds, with the runs' per-example noise
    taken out: the residual of the runs x examples table over ``N``); the test-sample variance of a
    run is ``Var_n / N`` of its pseudo-values, averaged over runs. A component the design cannot
    estimate (one seed of that kind) is NaN, not 0. Where the pretraining seeds' means vary less than
    their fine-tuning seeds explain (the moment estimate of its variance below 0), that variance is 0 and
    the runs' within-seed variance is the two mean squares pooled by their degrees of freedom, REML's
    estimate at that boundary in a balanced one-way classification (Searle, Casella & McCulloch 1992,
    *Variance Components*, ch. 3), not the within-seed one alone: that, the larger, made the planned MDE
    of a design where pretraining seeds do not matter twice the realised one (``tests/test_statistics.py``).
    A negative fine-tuning estimate is 0."""
    runs, x = o.runs, o.pseudo_values()
    s, f, n = x.shape
    test = float(x.var(axis=2, ddof=1).mean() / n)
    noise = residual_mean_square(x.reshape(-1, n)) / n  # each run's own example noise, shared by no other run
    within = float(runs.var(axis=1, ddof=1).mean()) if f > 1 else 0.0
    between = float(runs.mean(axis=1).var(ddof=1)) if s > 1 else 0.0
    if s > 1 and f > 1 and between < within / f:  # σ²_p at 0: both mean squares estimate the within-seed variance
        within = ((s - 1) * f * between + s * (f - 1) * within) / (s * f - 1)
    finetuning = max(within - noise, 0.0) if f > 1 else float("nan")
    pretraining = max(between - within / f, 0.0) if s > 1 else float("nan")
    return Decomposition(pretraining, finetuning, test, noise, n)
