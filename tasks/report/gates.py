"""Did each pretrained model learn its objective? The gates of :mod:`tasks.pretraining.gates` as the
report reads them: per model (the final point of its curve, stage ``curves``, and the gates of its
training log, stage ``pretrain``), per objective over its pretraining seeds (the Pretraining
section's table), and as the reason a finding is *invalid* (:func:`invalid_reason`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import stats

from tasks.core.metrics.downstream import FinetuneMetrics
from tasks.core.metrics.pretraining import CurvesMetrics, GateResult, PretrainMetrics
from tasks.core.paths import seeded
from tasks.report.common import fmt, load_metrics, table


def gate_curve(metrics: Path, name: str) -> list[tuple[float, list[GateResult]]] | None:
    """``[(fraction, gates)]`` of model ``name``, from its first snapshot to the end (the training
    log's gates join the end's); None when stage ``curves`` has not measured it with gates."""
    curve = load_metrics(metrics / "curves" / f"{name}.json", CurvesMetrics)
    if curve is None or not curve.points or any(p.gates is None for p in curve.points):
        return None
    run = load_metrics(metrics / "pretrain" / f"{name}.json", PretrainMetrics)
    points = [(p.fraction, list(p.gates)) for p in curve.points]
    points[-1][1].extend((run.gates or []) if run else [])
    return points


# A model is compared only if it passes every gate from half its budget on, in every seed: one that passes only
# at its end is at the edge of learning its objective (issue 60; WWM and ELECTRA at the study's budget).
LEARNED_BY = 0.5


def failed_gates(metrics: Path, name: str) -> list[str] | None:
    """The gates model ``name`` failed at a snapshot from :data:`LEARNED_BY` of its budget on, each as
    ``<gate> at <fraction>`` (its first such failure), [] when it passed them all; None when it has no
    gates (stage ``curves`` has not run with them). Its end is always judged, whatever its snapshots."""
    points = gate_curve(metrics, name)
    if points is None:
        return None
    failed: dict[str, str] = {}
    for fraction, gates in points:
        if fraction >= LEARNED_BY or fraction == points[-1][0]:
            for g in gates:
                if not g.passed:
                    failed.setdefault(g.name, f"{g.name} at {fraction:g}")
    return list(failed.values())


def invalid_reason(metrics: Path, procedures: dict[str, dict], names: tuple[str, ...]) -> str | None:
    """Why a comparison of ``names`` (procedures) is not valid: the first pretrained model of theirs
    that failed a gate from :data:`LEARNED_BY` of its budget on (``invalid: <model> did not learn its
    objective by half its budget (<gate> at <fraction>)``) or has none
    (``unchecked``); None when every pretrained model passed. Random init and published models have
    no objective of this run to pass (``procedures``: procedure -> ``{seed: model}``; a procedure
    whose models are named by the procedure itself is a published one)."""
    for procedure in names:
        if procedure == "random":
            continue
        for model in procedures.get(procedure, {}).values():
            if model == procedure:
                break  # a published checkpoint
            failed = failed_gates(metrics, model)
            if failed is None:
                return f"unchecked: {model} has no gates (stage curves)"
            if failed:
                return f"invalid: {model} did not learn its objective by half its budget ({failed[0]})"
    return None


def finetune_failure(metrics: Path, procedures: dict[str, dict], names: tuple[str, ...], task: str) -> str | None:
    """Why a comparison of ``names`` on ``task`` is not valid on the fine-tuning side: the first model
    of theirs whose every fine-tuning run scored 0 on the task's headline (an F1 of 0: the tagger or
    reader found nothing right, e.g. every token tagged O), which is a run that did not learn the
    task, not a score to compare (``invalid: <model> did not learn <task> (<headline> 0 in every
    fine-tuning run)``); None when none did."""
    for procedure in names:
        for model in procedures.get(procedure, {}).values():
            done = load_metrics(metrics / "finetune" / f"{model}-{task}.json", FinetuneMetrics)
            if done is not None and done.runs and all(run.test[done.headline] == 0 for run in done.runs):
                return f"invalid: {model} did not learn {task} ({done.headline} 0 in every fine-tuning run)"
    return None


def _first_pass(curves: list[list[tuple[float, list[GateResult]]]], gate: str) -> str:
    """The first fraction of the budget from which ``gate`` passes in every seed at every later point."""
    fractions = [f for f, _ in curves[0]]
    for i, fraction in enumerate(fractions):
        if all(next((g.passed for g in run[j][1] if g.name == gate), False)
               for run in curves for j in range(i, len(fractions))):
            return f"{fraction:g}"
    return "never"


def gates_table(metrics: Path, objectives: list[str], seeds: list[int]) -> str | None:
    """A row per objective and gate at the end of the budget: the value (mean over pretraining
    seeds) with its 95% interval (over seeds; with one seed, the model's own), the threshold, how
    many seeds passed, from which fraction of the budget every seed passes, and the held-out sequences
    measured (the fewest over seeds: the intervals' independent units)."""
    rows = []
    for objective in objectives:
        curves = [gate_curve(metrics, seeded(objective, s)) for s in seeds]
        if not all(curves):
            continue
        finals = [load_metrics(metrics / "curves" / f"{seeded(objective, s)}.json", CurvesMetrics).points[-1]
                  for s in seeds]
        sequences = min((p.sequences for p in finals if p.sequences is not None), default=None)
        for gate in curves[0][-1][1]:
            ends = [next(g for g in run[-1][1] if g.name == gate.name) for run in curves]
            values = np.array([np.nan if g.value is None else g.value for g in ends], dtype=float)
            if len(ends) > 1:
                half = stats.t.ppf(0.975, len(ends) - 1) * values.std(ddof=1) / np.sqrt(len(ends))
                low, high = values.mean() - half, values.mean() + half
            else:
                low, high = (np.nan if v is None else v for v in (ends[0].low, ends[0].high))
            rows.append([objective, gate.name, f"{fmt(float(values.mean()), 3)} [{fmt(float(low), 3)}, "
                                               f"{fmt(float(high), 3)}]",
                         f"{'>' if gate.above else '<'} {fmt(gate.threshold, 3)}",
                         f"{sum(g.passed for g in ends)}/{len(ends)}", _first_pass(curves, gate.name), fmt(sequences)])
    return table(["objective", "gate", "value at the end [95% CI]", "threshold", "seeds passed",
                  "every seed passes from (fraction of budget)", "held-out sequences"], rows) if rows else None
