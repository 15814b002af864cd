"""Report sections "Findings" and "Objective comparison": the claims of the BERT-wwm / MacBERT /
PERT / CINO line this run can test, each as a mean difference of procedures with its 95%
interval and verdict (:mod:`tasks.report.statistics`), and every procedure on every task.

A *procedure* is what a claim is about: a compared objective pretrained under each pretraining
seed (``mlm-42``, ``mlm-43``, ...), random init under the same seeds, or a published checkpoint
(one of it: a claim about it is about that checkpoint). Its outcomes on a task are the per-example
counts of each run's test predictions (:mod:`tasks.report.outcomes`), in percentage points.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tasks.core.metrics.compression import DistillMetrics
from tasks.core.metrics.downstream import FinetuneMetrics
from tasks.core.metrics.multilingual import ContinuePretrainMetrics
from tasks.core.paths import seeded
from tasks.downstream.families import FAMILIES
from tasks.downstream.outcomes import CLASSIC
from tasks.report.common import json_number, load_metrics, table
from tasks.report.gates import finetune_failure, invalid_reason
from tasks.report.outcomes import run_counts
from tasks.report.statistics import Comparison, Outcomes, compare, from_runs, interval, two_proportions
from tasks.report.variance import decompose
from tasks.report.templating import render_blocks


@dataclass(frozen=True)
class Claim:
    """A claim of the line: ``a`` beats ``b`` (procedures) on the tasks of ``families``."""

    finding: str
    source: str
    a: str
    b: str
    families: tuple[str, ...] = ("classification", "mrc", "ner")


PRETRAINING = "mlm"  # the procedure that stands for "pretrained" (BERT's recipe)
CLAIMS = (
    Claim("pretraining beats random init", "BERT (Devlin et al. 2019)", PRETRAINING, "random"),
    Claim("pretraining beats the classic baseline", "a fine-tune must beat TF-IDF, overlap features or a CRF on "
          "the same training data (docs/statistics.md#competence)", PRETRAINING, CLASSIC),
    Claim("whole word masking beats MLM on MRC and NER", "Chinese BERT-wwm (Cui et al. 2021, §4)", "wwm", "mlm",
          ("mrc", "ner")),
    Claim("MLM as correction (Mac) beats random replacement", "MacBERT (Cui et al. 2020, Table 8)", "mac",
          "mac_random_replace"),
    Claim("random replacement beats partial masking", "MacBERT (Cui et al. 2020, Table 8)", "mac_random_replace",
          "ngram"),
    Claim("partial masking beats all masking", "MacBERT (Cui et al. 2020, Table 8)", "ngram", "mac_all_mask"),
    Claim("correcting sound-alike characters matches or beats [MASK]", "this project, after MacBERT's MLM as "
          "correction (Cui et al. 2020, §3.2)", "sound_alike", "mlm"),
    Claim("permuted LM (PerLM) beats MLM on MRC and NER", "PERT (Cui et al. 2022, §5)", "perlm", "mlm",
          ("mrc", "ner")),
    Claim("SOP beats NSP", "ALBERT (Lan et al. 2020, §4.6)", "wwm_sop", "wwm_nsp"),
    Claim("dynamic masking matches or beats static", "RoBERTa (Liu et al. 2019, Table 1)", "wwm_dynamic", "wwm"),
    Claim("replaced-token detection beats MLM at equal compute", "ELECTRA (Clark et al. 2020, §3.3)", "electra", "mlm"),
    Claim("span masking beats whole word masking", "SpanBERT (Joshi et al. 2020, Table 6)", "span", "wwm"),
    Claim("the span boundary objective helps span masking", "SpanBERT (Joshi et al. 2020, Table 7)", "span_sbo",
          "span"),
    Claim("permutation without a limit beats permutation within words", "PERT (Cui et al. 2022, §6, granularity)",
          "perlm", "perlm_word"),
    Claim("predicting positions (local) beats predicting tokens (global)", "PERT (Cui et al. 2022, §6, space)",
          "perlm", "perlm_global"),
    Claim("partial prediction beats full prediction", "PERT (Cui et al. 2022, §6)", "perlm", "perlm_full"),
)


def procedures(params) -> dict[str, dict]:
    """Procedure -> ``{seed: model}``: each compared objective and random init once per pretraining
    seed, each hub baseline alone (its own name for a seed, so that it pairs with nothing)."""
    seeds = params.pretrain.seeds
    return {**{p: {s: seeded(p, s) for s in seeds} for p in [*params.compare, "random"]},
            **{b: {b: b} for b in params.finetune.baselines}}


def load_outcomes(params, metrics: Path) -> dict[tuple[str, str], Outcomes]:
    """``(procedure, task) -> Outcomes`` of the headline metric on the test split (the per-example counts
    finetune wrote under ``metrics/outcomes/``), for the procedures whose every model has been fine-tuned
    on the task (same fine-tuning seeds)."""
    found = {}
    for procedure, models in procedures(params).items():
        for task in params.finetune.tasks:
            runs = [load_metrics(metrics / "finetune" / f"{m}-{task}.json", FinetuneMetrics) for m in models.values()]
            # Matthews, Pearson: no outcomes
            if not all(runs) or runs[0].headline not in FAMILIES[runs[0].family].counted:
                continue
            seeds = [r.seed for r in runs[0].runs]
            counted = [run_counts(metrics / "outcomes" / f"{m}-{task}.parquet", seeds) for m in models.values()]
            found[procedure, task] = Outcomes(np.asarray([c for c, _, _ in counted]), _points(*counted[0][1:]),
                                              tuple(models), tuple(seeds))
    for task in params.finetune.tasks:  # the classic baseline (stage baseline): one deterministic run
        path = metrics / "outcomes" / f"{CLASSIC}-{task}.parquet"
        if path.is_file():
            c, metric, family = run_counts(path, [0])
            found[CLASSIC, task] = Outcomes(c[None], _points(metric, family), (CLASSIC,), (0,))
    return found


def _points(metric, family: str):
    """``metric`` in percentage points (MRC's official script already gives percentages)."""
    scale = FAMILIES[family].percent
    return lambda sums: scale * metric(sums)


def competence(outcomes: dict, procedure: str, task: str) -> tuple[Comparison, str] | None:
    """``procedure − classic baseline`` on ``task`` (unpaired over seeds, paired over test examples) and its
    reading: *above*, *below* or *within noise of* the classic baseline; where the design gives no verdict
    (under 3 replicates), *above* or *below in every run* when all of the procedure's runs fall on one side of
    the baseline's score, else *mixed*. None without both outcomes."""
    if (procedure, task) not in outcomes or (CLASSIC, task) not in outcomes:
        return None
    a, base = outcomes[procedure, task], outcomes[CLASSIC, task]
    c = compare(a, base)
    if not c.withheld:
        return c, {"better": "above", "worse": "below"}.get(c.verdict, "within noise of")
    runs, score = a.runs, base.estimate
    return c, ("above in every run" if (runs > score).all() else "below in every run" if (runs < score).all()
               else "mixed")


def beats_classic(outcomes: dict, procedure: str, task: str) -> bool | None:
    """Whether ``procedure`` beat the task's classic baseline (:func:`competence` reads *above*, in every run
    where there is no verdict); None without a classic baseline for the task."""
    found = competence(outcomes, procedure, task)
    return None if found is None else found[1].startswith("above")


def _families(params) -> dict[str, str]:
    return {t: params.tasks[t].family for t in params.finetune.tasks}


def cells(c: Comparison, invalid: str | None = None) -> list[str]:
    """``[Δ [low, high], p, MDE]``; ``[Δ, -, -]`` where the verdict is withheld (:attr:`Comparison.withheld`)
    or the comparison is ``invalid`` (a model that did not learn: an interval would read as a finding)."""
    signed = lambda x: f"{round(x, 2) + 0.0:+.2f}"  # noqa: E731  (+ 0.0: no "-0.00")
    if c.withheld or invalid:
        return [signed(c.difference), "-", "-"]
    return [f"{signed(c.difference)} [{signed(c.low)}, {signed(c.high)}]", f"{c.p_value:.3f}", f"{c.mde:.2f}"]


def _claim(c: Comparison) -> str:
    """The verdict said of a claim (a − b in the paper's direction): ``agrees``, ``contradicts`` or the verdict."""
    return {"better": "agrees", "worse": "contradicts"}.get(c.verdict, c.verdict)


def _row(finding: str, source: str, task: str, c: Comparison, about: str, invalid: str | None = None) -> list[str]:
    """A Findings row; ``invalid`` (:func:`tasks.report.gates.invalid_reason`) replaces the verdict."""
    return [finding, source, task, *cells(c, invalid), invalid or f"{_claim(c)}{about}"]


def _about(c: Comparison) -> str:
    return {"pretraining seeds": "", "fine-tuning seeds": " (about this checkpoint, not the procedure)",
            "test examples": " (about this one run)"}[c.replicates]


def findings_rows(params, outcomes: dict, metrics: Path) -> list[list[str]]:
    """One row per (claim, task) that ran, and one ``not run`` row per claim whose procedures did not."""
    families, rows = _families(params), []
    for claim in CLAIMS:
        tasks = [t for t, f in families.items() if f in claim.families]
        ran = [t for t in tasks if (claim.a, t) in outcomes and (claim.b, t) in outcomes]
        if not ran:
            missing = [p for p in (claim.a, claim.b) if p not in params.compare and p not in ("random", CLASSIC)]
            why = (f"add {' and '.join(missing)} to compare" if missing else "not run yet (stages baseline, finetune)"
                   if CLASSIC in (claim.a, claim.b) else "not fine-tuned yet (stage finetune)")
            rows.append([claim.finding, claim.source, "-", "not run", "-", "-", f"not run: {why}"])
            continue
        invalid = invalid_reason(metrics, procedures(params), (claim.a, claim.b))
        for t in ran:
            c, reading = (competence(outcomes, claim.a, t) if claim.b == CLASSIC
                          else (compare(outcomes[claim.a, t], outcomes[claim.b, t]), None))
            failed = invalid or finetune_failure(metrics, procedures(params), (claim.a, claim.b), t)
            if not failed and CLASSIC not in (claim.a, claim.b) and all(
                    beats_classic(outcomes, p, t) is False for p in (claim.a, claim.b)):
                failed = "below the classic baseline: neither side beats it (Competence)"
            if claim.b == CLASSIC and c.withheld and not failed:  # no verdict: which side every run fell on
                rows.append([claim.finding, claim.source, t, *cells(c), f"{reading} ({c.verdict})"])
                continue
            rows.append(_row(claim.finding, claim.source, t, c, _about(c), failed))
    rows += _reference_rows(params, outcomes, metrics) + _cino_rows(params, metrics) + _distill_rows(params, metrics)
    return rows


def _reference_rows(params, outcomes: dict, metrics: Path) -> list[list[str]]:
    """How far this run's pretraining is from a published model of similar size (unpaired)."""
    rows = []
    for baseline in params.finetune.baselines:
        invalid = invalid_reason(metrics, procedures(params), (PRETRAINING, baseline))
        for t in params.finetune.tasks:
            if (PRETRAINING, t) in outcomes and (baseline, t) in outcomes:
                c = compare(outcomes[PRETRAINING, t], outcomes[baseline, t])
                failed = invalid or finetune_failure(metrics, procedures(params), (PRETRAINING, baseline), t)
                rows.append([f"this run's {PRETRAINING} vs the published {baseline} (reference)", "-", t,
                             *cells(c, failed), failed or c.verdict])
    return rows


def _cino_rows(params, metrics: Path) -> list[list[str]]:
    """CINO: resampling helps the small languages (held-out MLM accuracy, resampled − natural), with
    the Agresti-Caffo interval over the held-out predictions of the two checkpoints
    (:func:`tasks.report.statistics.two_proportions`)."""
    runs = {m: load_metrics(metrics / "continue_pretrain" / f"{m}.json", ContinuePretrainMetrics)
            for m in ("resampled", "natural")}
    if not all(runs.values()):
        return [["resampling helps the small languages", "CINO (Yang et al. 2022, §3.2)", "-", "not run", "-", "-",
                 "not run: add the mixtures resampled and natural"]]
    rows = []
    after = {m: r.heldout.after for m, r in runs.items()}
    small = sorted(after["natural"], key=lambda lang: after["natural"][lang].predictions)[:4]
    for lang in small:
        a, b = after["resampled"][lang], after["natural"][lang]
        if not a.predictions or not b.predictions or a.accuracy is None or b.accuracy is None:
            continue
        c = two_proportions(round(a.accuracy * a.predictions), a.predictions,
                            round(b.accuracy * b.predictions), b.predictions)
        rows.append(["resampling helps the small languages", "CINO (Yang et al. 2022, §3.2)",
                     f"held-out MLM accuracy, {lang}", *cells(c), f"{_claim(c)} (about these two checkpoints)"])
    return rows


def _distill_rows(params, metrics: Path) -> list[list[str]]:
    """TextBrewer: the distilled student beats the student trained on labels alone (paired over
    fine-tuning seeds; the teacher is one checkpoint)."""
    rows = []
    for student in params.compression.students:
        for task in params.compression.tasks:
            m = load_metrics(metrics / "distill" / f"{student}-{task}.json", DistillMetrics)
            if m is None:
                continue
            variants = {v.name: v for v in m.variants}
            if "kd" not in variants or "labels" not in variants or len(m.seeds) < 2:
                continue
            scale = FAMILIES[m.family].percent
            score = {name: [scale * r.test[m.headline] for r in v.runs] for name, v in variants.items()}
            c = from_runs(score["kd"], score["labels"], paired=True)
            rows.append([f"distillation beats labels alone ({student})", "TextBrewer (Yang et al. 2020, §4)", task,
                         *cells(c), f"{_claim(c)} (about this teacher)"])
    return rows


def findings_section(params, outcomes: dict, metrics: Path) -> str:
    """The section's Markdown: the Findings table and how to read it."""
    header = ["finding", "source", "task", "Δ (a − b), points [95% CI]", "p", "MDE", "this run"]
    return render_blocks("findings.md.j2", table=table(header, findings_rows(params, outcomes, metrics)),
                         seeds=len(params.pretrain.seeds), finetune_seeds=len(params.finetune.seeds))


def comparison_section(params, outcomes: dict) -> str:
    """Every procedure on every task (mean with its 95% interval, HFL's max (mean) of the runs),
    each task's variance decomposition and the minimum detectable effect of a comparison of two
    procedures of this design; empty when nothing was fine-tuned."""
    tasks = [t for t in params.finetune.tasks if any((p, t) in outcomes for p in procedures(params))]
    if not tasks:
        return ""
    rows, decomposition = [], []
    for p in procedures(params):
        if not any((p, t) in outcomes for t in tasks):  # a published model with no task of this run
            continue
        row = []
        for t in tasks:
            o = outcomes.get((p, t))
            if o is None:
                row.append("-")
                continue
            ci, runs = interval(o), o.runs
            mean = f"{ci.difference:.1f}" + ("" if ci.withheld else f" [{ci.low:.1f}, {ci.high:.1f}]")
            row.append(f"{mean} · {runs.max():.1f} ({runs.mean():.1f})")
        rows.append([p, *row])
    for t in tasks:
        o = outcomes.get((PRETRAINING, t)) or next(outcomes[p, t] for p in procedures(params) if (p, t) in outcomes)
        d = decompose(o)
        # the MDE of a paired comparison of two procedures that vary as this one, at this design (the planner's)
        shares, planned = d.shares, d.planned_mde(len(o.seeds), len(o.finetune_seeds), d.examples)
        decomposition.append([t, *(f"{100 * shares[k]:.0f}%" if not np.isnan(shares[k]) else "n/a (one seed)"
                                   for k in ("pretraining_seed", "finetuning_seed", "test_sample")),
                              f"{planned:.2f}" if np.isfinite(planned) else "-"])
    headers = ["procedure", *[f"{t} ({_families(params)[t]})" for t in tasks]]
    classic = [t for t in tasks if (CLASSIC, t) in outcomes]
    distance = []
    if classic:
        rows.append([f"{CLASSIC} baseline (stage baseline)",
                     *(f"{outcomes[CLASSIC, t].estimate:.1f}" if t in classic else "-" for t in tasks)])
        for p in procedures(params):
            found = [competence(outcomes, p, t) for t in classic]
            if any(found):
                distance.append([p, *("-" if f is None else f"{cells(f[0])[0]} · {f[1]}" for f in found)])
    return render_blocks("comparison.md.j2", table=table(headers, rows),
                         competence=table(["procedure", *classic], distance) if distance else "",
                         decomposition=table(["task", "pretraining seed", "fine-tuning seed", "test sample",
                                              "MDE (points)"], decomposition),
                         seeds=len(params.pretrain.seeds), finetune_seeds=len(params.finetune.seeds))


def variance_components(params, outcomes: dict) -> dict[str, dict]:
    """Per task, the variance decomposition of the reference procedure (pretraining, :data:`PRETRAINING`,
    else the first that ran) in metric units² (points²), for the MDE planner
    (:mod:`tasks.report.planner`): ``procedure``, the components, ``examples``, and the design it came
    from (``seeds``, ``finetune_seeds``)."""
    out = {}
    for t in params.finetune.tasks:
        name = PRETRAINING if (PRETRAINING, t) in outcomes else next(
            (p for p in procedures(params) if (p, t) in outcomes), None)
        if name is None:
            continue
        o, d = outcomes[name, t], decompose(outcomes[name, t])
        out[t] = {"procedure": name, "seeds": len(o.seeds), "finetune_seeds": len(o.finetune_seeds),
                  "pretraining_seed": json_number(d.pretraining_seed), "finetuning_seed": json_number(d.finetuning_seed),
                  "test_sample": json_number(d.test_sample), "run_noise": json_number(d.run_noise), "examples": d.examples}
    return out
