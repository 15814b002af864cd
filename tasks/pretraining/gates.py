"""Did a pretrained model learn its objective? Gates on held-out measures, each with its 95% interval.

A comparison of two procedures is valid only when both models learned what they were trained on:
a model that predicts the corpus's unigram distribution at every masked position, or a
discriminator that calls every token "original", has learned nothing an encoder can pass on, and
fine-tuning it measures its initialisation. Each gate compares a held-out measure with the
*trivial* solution of the objective at the same positions:

* MLM family (MLM, WWM, N-gram, span; measured by :func:`tasks.pretraining.heldout.evaluate_mlm`):
  accuracy above the top token's (the most frequent token of the pretraining corpus, predicted
  everywhere; the held-out masks are all [MASK], so no position can be copied) and cross-entropy
  below the context-free loss, the corpus's unigram distribution at the same positions, by
  :data:`MLM_LOSS_MARGIN` nats. Mac, measured on similar words instead of [MASK], could also copy
  what it sees: its accuracy must beat the better of copying the input and the top token;
* a kind with a measure of its own brings its gates with it, built on :func:`difference_gate` and
  :class:`Gate` (ELECTRA's: loss below the base rate's entropy, ROC AUC above a floor);
* representations (every model): the mean cosine between the last layer's token states on
  held-out text below :data:`COLLAPSE_CEILING` (a collapsed encoder maps every token to nearly
  one direction: a replaced-token discriminator at an old recipe reached 0.93-0.98 from 0.45 at init);
* NSP/SOP, PerLM (from the last tenth of the pretraining log, :func:`training_log_gate`): sentence accuracy
  above 50%, PerLM's position accuracy above its trivial rate ``keep + (1 - keep) · E[1 / L]``
  (kept tokens point to themselves; a permuted one guessed among the ``L`` positions of its row).

Intervals: the per-position (per-token) differences from the trivial solution are clustered by
sequence, so their mean gets the cluster-robust (sandwich) variance over sequences
(:func:`clustered_mean`); the mean cosine a jackknife over sequences. A gate passes when its whole
interval is on the right side of its threshold. Sequences are the independent units: with fewer than
``MIN_GATE_SEQUENCES`` (20) a clustered or jackknife interval is not estimable (one sequence gives a standard error of 0), so it
reads n/a (NaN) and the gate fails. Thresholds are constants beside their gates, stated in the report beside
every value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from tasks.core.params.pretraining import MIN_GATE_SEQUENCES

MLM_LOSS_MARGIN = 0.1  # nats per masked token below the unigram loss
COLLAPSE_CEILING = 0.9
Z = 1.959963984540054  # scipy.stats.norm.ppf(0.975), written out: scipy.stats costs a pretraining stage 0.5 s to import


@dataclass(frozen=True)
class Gate:
    """One gate of one model: ``value`` with its 95% interval ``[low, high]`` against ``threshold``;
    ``above``: the gate wants the value above the threshold (else below). ``passed``: the whole
    interval is on the wanted side."""

    name: str
    value: float
    low: float
    high: float
    threshold: float
    above: bool

    @property
    def passed(self) -> bool:
        return bool(self.low > self.threshold) if self.above else bool(self.high < self.threshold)

    def record(self) -> dict:
        """Plain values for a metrics file, ``passed`` included (NaN, a value the data cannot give, as None)."""
        return {**{k: None if isinstance(v, float) and np.isnan(v) else v for k, v in asdict(self).items()},
                "passed": self.passed}


def clustered_mean(values: np.ndarray, clusters: np.ndarray) -> tuple[float, float]:
    """Mean of ``values`` (``[M]``) and its cluster-robust standard error, clusters (``int [M]``,
    e.g. the sequence of each masked position) as the independent units: the sandwich variance
    ``C / (C - 1) · Σ_c (S_c - m n_c)² / M²`` of a ratio mean (Cameron and Miller 2015, §II)."""
    values = np.asarray(values, dtype=np.float64)
    m = float(values.mean())
    _, inverse = np.unique(clusters, return_inverse=True)
    c = int(inverse.max()) + 1
    sums = np.bincount(inverse, weights=values - m, minlength=c)
    se = float(np.sqrt(c / max(c - 1, 1) * (sums ** 2).sum()) / len(values))
    return m, se


def difference_gate(name: str, difference: np.ndarray, clusters: np.ndarray, value: float, reference: float,
                     threshold: float, above: bool) -> Gate:
    """A gate on ``value`` (a mean) whose interval comes from its per-position ``difference`` to a
    ``reference`` mean at the same positions, so the reference's noise at those positions cancels."""
    mean, se = clustered_mean(difference, clusters)
    se = se if len(np.unique(clusters)) >= MIN_GATE_SEQUENCES else float("nan")  # too few sequences: n/a
    return Gate(name, value, reference + mean - Z * se, reference + mean + Z * se, threshold, above)


def unigram_log_probs(token_counts: np.ndarray) -> np.ndarray:
    """``float64 [V]`` log-probabilities of the corpus's unigram distribution: the counts of each
    token id in the pretraining corpus, add-½ smoothed (every token, [UNK] included, keeps a
    finite loss; the ones a mask never chooses, [CLS], [SEP], [PAD], [MASK], do not occur in it)."""
    counts = np.asarray(token_counts, dtype=np.float64) + 0.5
    return np.log(counts / counts.sum())


def mlm_gates(losses: np.ndarray, correct: np.ndarray, labels: np.ndarray, rows: np.ndarray,
              unigram: np.ndarray, inputs: np.ndarray | None = None) -> tuple[list[Gate], dict]:
    """The MLM family's gates (module docstring) from the held-out masked positions.

    Args:
        losses, correct: ``[M]`` the model's cross-entropy (nats) and whether its argmax was right.
        labels: ``int [M]`` the original tokens; rows: ``int [M]`` the sequence of each position.
        unigram: :func:`unigram_log_probs` of the pretraining corpus.
        inputs: ``int [M]`` the corrupted tokens the model saw, when it could copy them (Mac); None
            under [MASK].
    Returns:
        ``(gates, references)``: references holds ``unigram_loss`` and ``top_token_accuracy`` (and,
        with ``inputs``, ``copy_accuracy``).
    """
    top = labels == int(np.argmax(unigram))
    context_free = -unigram[labels]
    references = {"unigram_loss": float(context_free.mean()), "top_token_accuracy": float(top.mean())}
    trivial, name = top, "accuracy above the top token's"
    if inputs is not None:
        copy = inputs == labels
        references["copy_accuracy"] = float(copy.mean())
        trivial = copy if copy.mean() > top.mean() else top  # the better trivial predictor
        name = "accuracy above copying the input and the top token's"
    gates = [
        difference_gate(name, correct.astype(np.float64) - trivial, rows, float(correct.mean()),
                         float(trivial.mean()), float(trivial.mean()), above=True),
        difference_gate(f"loss {MLM_LOSS_MARGIN:g} nats below the unigram loss", losses - context_free, rows,
                         float(losses.mean()), references["unigram_loss"],
                         references["unigram_loss"] - MLM_LOSS_MARGIN, above=False),
    ]
    return gates, references


def collapse_gate(sums: np.ndarray, counts: np.ndarray) -> Gate:
    """The mean cosine between token states from per-sequence sums of unit-normalised states
    (``sums [S, H]``, ``counts int [S]``): ``(‖Σ h‖² - N) / (N (N - 1))`` over all ``N`` tokens
    (pairs of distinct tokens), with a jackknife interval over the ``S`` sequences."""
    total, n = sums.sum(0), float(counts.sum())

    def cosine(t: np.ndarray, m: float) -> float:
        return float((t @ t - m) / (m * (m - 1)))

    value = cosine(total, n)
    leave_out = np.array([cosine(total - s, n - c) for s, c in zip(sums, counts)])
    k = len(counts)
    se = float(np.sqrt((k - 1) / k * ((leave_out - leave_out.mean()) ** 2).sum())) if k >= MIN_GATE_SEQUENCES \
        else float("nan")
    return Gate("mean cosine between token states", value, value - Z * se, value + Z * se, COLLAPSE_CEILING,
                above=False)


def proportion_gate(name: str, correct: float, total: float, threshold: float) -> Gate:
    """A gate on an accuracy of ``correct`` of ``total`` (Wilson's score interval) above ``threshold``."""
    if total <= 0:
        return Gate(name, float("nan"), float("nan"), float("nan"), threshold, above=True)
    p = correct / total
    centre = (p + Z ** 2 / (2 * total)) / (1 + Z ** 2 / total)
    half = Z * np.sqrt(p * (1 - p) / total + Z ** 2 / (4 * total ** 2)) / (1 + Z ** 2 / total)
    return Gate(name, p, float(centre - half), float(centre + half), threshold, above=True)


def perlm_trivial_rate(positions: np.ndarray, labels: np.ndarray, tokens: int, full_targets: bool) -> float:
    """PerLM's trivial accuracy: every token predicted to stay where it is, right for the kept
    tokens and the permutation's fixed points (and, under full targets, every unchosen token).

    Args:
        positions, labels: ``int [M]`` the chosen positions and their labels (the position each
            token came from) of the static pretraining data; tokens: its non-padding tokens.
    """
    stay = float((np.asarray(positions) == np.asarray(labels)).sum())
    return (stay + tokens - len(positions)) / tokens if full_targets else stay / max(len(positions), 1)


def training_log_gate(rows: list[dict], column: str, per_row: float, name: str, threshold: float) -> Gate:
    """A proportion gate from the last tenth of a pretraining log (``metrics/pretrain/<name>.csv`` rows,
    whose ``column`` is the mean accuracy over ``per_row`` predictions: sequences for NSP/SOP, token
    predictions for PerLM) against ``threshold`` (chance, PerLM's trivial rate: :func:`perlm_trivial_rate`).
    Training accuracy, not held-out: these heads have no held-out measure, and the log's last tenth is
    the model as it ends."""
    tail = rows[-max(1, len(rows) // 10):]
    seen = per_row * len(tail)
    correct = sum(float(r[column]) for r in tail) / len(tail) * seen
    return proportion_gate(name, correct, seen, threshold)
