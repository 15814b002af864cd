"""The held-out measures: how well a masked LM predicts masked tokens of text it never saw (this
module), and what every measure shares: the held-out text, the seeded masks, the collapse gate
(:func:`measure_models`). Each measure is a :class:`tasks.pretraining.objectives.base.Measure` of its kind's
module (the MLM family's: :class:`tasks.pretraining.objectives.masked.MlmMeasure`).

15% of the tokens of every held-out sequence (at most ``max_predictions`` per sequence) are
masked, all as [MASK], with a generator seeded by the run's seed and a name alone, so every
model sees exactly the same masked positions. The MLM measure is the accuracy and the mean
cross-entropy (and perplexity, its exponential) over those positions.

Mac never sees [MASK] (MacBERT, Cui et al. 2020, §3.2: "MLM as correction"), so [MASK] positions
would measure a task it was not trained on. Its measure (``mac``) corrupts the held-out text as its
pretraining data does: jieba words of the text (stage ``segment``'s settings), whole words or
N-grams of them chosen, and every chosen word replaced by a similar word of the same token length
(a random word where it has none), the same for every Mac model (:class:`MacCorruption`); a model
that copies its input is then a trivial solution beside the top token
(:func:`tasks.pretraining.gates.mlm_gates`). A substitution objective (``sound``: sound-alike
characters, :mod:`tasks.pretraining.objectives.sound_alike`) is measured the same way: every chosen
token of the held-out text becomes one of its candidates.

The multilingual stages measure each language's held-out documents with the MLM measure
(:mod:`tasks.multilingual.continue_pretrain`); the score-for-compute curves measure every
pretrained model and its snapshots (stage ``curves``; the inputs: ``heldout_inputs`` of
:class:`tasks.pretraining.objectives.PretrainingObjective`), the cheap measure
beside fine-tuning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from transformers import AutoModel, PreTrainedModel, PreTrainedTokenizerBase

from tasks.core import paths
from tasks.core.errors import SourceError
from tasks.core.rng import named_rng
from tasks.corpus.segment import segment_shard
from tasks.corpus.similar_words import SimilarWords, lexicon_ids, similar_words_from_table
from tasks.corpus.tokenize import random_token_ids, tokenize_words
from tasks.pretraining.gates import collapse_gate, unigram_log_probs
from tasks.pretraining.masking import MaskingConfig, Substitution, mask_batch
from tasks.pretraining.packing import pack_documents
from tasks.training.batching import pad_batch



def pack_by_language(tokenizer: PreTrainedTokenizerBase, langs: list[str], texts: list[str],
                     max_seq_length: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per language, its documents packed into ``[CLS] ... [SEP]`` sequences.

    Returns:
        ``{lang: (ids, offsets)}``: the sequences of ``lang`` in flat layout
        (:mod:`tasks.training.batching`), documents in the order given; languages in order of
        first appearance.
    """
    # split_special_tokens: a literal "[MASK]" in a document is word-pieced, never the mask id (as in
    # tasks.corpus.tokenize); documents without such strings (all packaged text) get the same ids.
    ids = tokenizer(texts, add_special_tokens=False, split_special_tokens=True,
                    return_attention_mask=False)["input_ids"]
    by_lang: dict[str, list[int]] = {}
    for i, lang in enumerate(langs):
        by_lang.setdefault(lang, []).append(i)
    out = {}
    for lang, rows in by_lang.items():
        docs = [np.asarray(ids[i], dtype=np.int32) for i in rows if ids[i]]
        packed = pack_documents([lang] * len(docs), docs, [np.arange(len(d), dtype=np.int32) for d in docs],
                                max_seq_length, tokenizer.cls_token_id, tokenizer.sep_token_id)
        valid, offsets = _flat_layout(packed.lengths, packed.input_ids.shape[1])
        out[lang] = (packed.input_ids[valid], offsets)
    return out


def _flat_layout(lengths: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Of packed rows of ``lengths`` tokens (``[N]``) in a ``[N, width]`` array: the ``bool [N, width]``
    mask of their tokens and the flat layout's ``int64 [N + 1]`` offsets."""
    valid = np.arange(width)[None, :] < lengths[:, None]
    return valid, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def word_ids_for(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Flat word ids for token-level MLM: each token its own word, -1 on [CLS] and [SEP]."""
    word = np.arange(len(ids), dtype=np.int32)
    word[offsets[:-1]] = -1
    word[offsets[1:] - 1] = -1
    return word


@dataclass(frozen=True)
class MacCorruption:
    """Mac's held-out corruption (module docstring): what :func:`evaluate_mlm` needs beyond the ids.

    Attributes:
        words: ``int32 [T]`` dense jieba word index of each held-out token within its sequence, -1 on
            [CLS] and [SEP] (the flat layout of the ids).
        lex_ids: ``int32 [T]`` the similar-word lexicon entry of each token's word, -1 if none.
        similar: the lexicon's similar words; random_token_ids: what a word without one becomes.
        scheme: the objective's word units (``wwm`` or ``ngram``); ngram_probs: P(1, 2, ... words).
    """

    words: np.ndarray
    lex_ids: np.ndarray
    similar: SimilarWords
    random_token_ids: np.ndarray
    scheme: str
    ngram_probs: tuple[float, ...]


def masked_batches(ids: np.ndarray, offsets: np.ndarray, lang: str, seed: int, mask_token_id: int,
                    masked_lm_prob: float, max_predictions: int, batch_size: int, device: torch.device,
                    mac: MacCorruption | None = None, substitution: tuple[Substitution, np.ndarray] | None = None):
    """The held-out sequences in batches, corrupted the same way for every model: ``(input_ids,
    attention_mask, rows, cols, labels, inputs)`` tensors on ``device`` (``inputs``: the corrupted
    token at each chosen position) and ``start``, the first sequence's index (``rows`` are within the
    batch); batches without a chosen token left out. Single tokens, all [MASK]; with ``mac``, its
    word units, all similar words; with ``substitution`` (a table, and the random ids a token without a
    candidate takes), single tokens, all substituted."""
    if substitution is not None:
        config = MaskingConfig(scheme="mlm", masked_lm_prob=masked_lm_prob, max_predictions=max_predictions,
                               mask=0.0, random=0.0, substitute=1.0, substitution=substitution[0])
        words, lex, similar, random_ids = word_ids_for(ids, offsets), None, None, substitution[1]
    elif mac is None:
        config = MaskingConfig(scheme="mlm", masked_lm_prob=masked_lm_prob, max_predictions=max_predictions,
                               mask=1.0, random=0.0)
        words, lex, similar, random_ids = word_ids_for(ids, offsets), None, None, np.array([mask_token_id])
    else:
        config = MaskingConfig(scheme=mac.scheme, masked_lm_prob=masked_lm_prob, max_predictions=max_predictions,
                               mask=0.0, random=0.0, similar=1.0, ngram_probs=mac.ngram_probs)
        words, lex, similar, random_ids = mac.words, mac.lex_ids, mac.similar, mac.random_token_ids
    rng = named_rng(seed, lang)
    for start in range(0, len(offsets) - 1, batch_size):
        index = np.arange(start, min(start + batch_size, len(offsets) - 1))
        batch_ids, valid = pad_batch(ids, offsets, index)
        batch_words, _ = pad_batch(words, offsets, index, pad_value=-1)
        batch_lex = None if lex is None else pad_batch(lex, offsets, index, pad_value=-1)[0]
        masked = mask_batch(batch_ids, batch_words, config, rng, mask_token_id=mask_token_id,
                            random_token_ids=random_ids, lex_ids=batch_lex, similar=similar)
        rows, cols = np.nonzero(masked.chosen)
        if len(rows):
            yield tuple(torch.from_numpy(np.asarray(x).astype(np.int64)).to(device)
                        for x in (masked.input_ids, valid, rows, cols, masked.labels[rows, cols],
                                  masked.input_ids[rows, cols])) + (start,)


@torch.no_grad()
def evaluate_mlm(model: PreTrainedModel, ids: np.ndarray, offsets: np.ndarray, *, lang: str, seed: int,
                 mask_token_id: int, masked_lm_prob: float, max_predictions: int, device: torch.device,
                 batch_size: int = 32, positions: bool = False, mac: MacCorruption | None = None,
                 substitution: tuple[Substitution, np.ndarray] | None = None) -> dict:
    """MLM accuracy and perplexity on held-out sequences (module docstring).

    Args:
        model: a masked LM (its ``bert`` encoder and ``cls`` head are used).
        ids, offsets: the sequences in flat layout (:func:`pack_by_language`).
        lang: seeds the masks together with ``seed``: the same positions for every model.
        positions: also return each masked position's measures (for :mod:`tasks.pretraining.gates`).
        mac: Mac's corruption instead of [MASK] (:func:`mac_text`).
        substitution: a substitution table (and the random ids a token without a candidate takes)
            instead of [MASK] (:mod:`tasks.pretraining.objectives.sound_alike`).
    Returns:
        ``{"predictions", "loss", "accuracy", "perplexity"}`` (loss in nats per masked token; None
        without a prediction); with ``positions``, ``"positions"``: ``{"losses", "correct",
        "labels", "inputs", "rows"}``, ``[M]`` arrays (``inputs``: the corrupted token the model
        saw; ``rows``: the sequence of each position).
    """
    model.to(device).eval()
    parts = {"losses": [], "correct": [], "labels": [], "inputs": [], "rows": []}
    for input_ids, valid, rows, cols, labels, inputs, start in masked_batches(
            ids, offsets, lang, seed, mask_token_id, masked_lm_prob, max_predictions, batch_size, device, mac,
            substitution):
        hidden = model.bert(input_ids=input_ids, attention_mask=valid).last_hidden_state
        logits = model.cls(hidden[rows, cols]).float()
        parts["losses"].append(F.cross_entropy(logits, labels, reduction="none").double().cpu())
        parts["correct"].append((logits.argmax(-1) == labels).cpu())
        parts["labels"].append(labels.cpu())
        parts["inputs"].append(inputs.cpu())
        parts["rows"].append(rows.cpu() + start)
    if not parts["losses"]:
        return {"predictions": 0, "loss": None, "accuracy": None, "perplexity": None}
    arrays = {k: torch.cat(v).numpy() for k, v in parts.items()}
    loss = float(arrays["losses"].sum()) / len(arrays["losses"])
    out = {"predictions": len(arrays["losses"]), "loss": loss, "accuracy": float(arrays["correct"].mean()),
           "perplexity": math.exp(loss)}
    return {**out, "positions": arrays} if positions else out


@torch.no_grad()
def token_state_sums(encoder: PreTrainedModel, ids: np.ndarray, offsets: np.ndarray, device: torch.device,
                     batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Per held-out sequence, the sum of its last-layer token states normalised to unit length and
    its token count (``[S, H]``, ``int [S]``): what :func:`tasks.pretraining.gates.collapse_gate`
    needs for the mean cosine between token states. ``encoder``: an ``AutoModel`` of any kind's encoder."""
    encoder.to(device).eval()
    sums, counts = [], []
    for start in range(0, len(offsets) - 1, batch_size):
        index = np.arange(start, min(start + batch_size, len(offsets) - 1))
        batch_ids, valid = pad_batch(ids, offsets, index)
        mask = torch.from_numpy(valid.astype(np.int64)).to(device)
        hidden = encoder(input_ids=torch.from_numpy(batch_ids.astype(np.int64)).to(device),
                         attention_mask=mask).last_hidden_state.float()
        unit = F.normalize(hidden, dim=-1) * mask[..., None]
        sums.append(unit.sum(1).double().cpu())
        counts.append(mask.sum(1).cpu())
    return torch.cat(sums).numpy(), torch.cat(counts).numpy()


def _eval_texts(task: str, split: str | None) -> list[str]:
    """The evaluation text of ``task`` (its dev and test text, which ingest kept out of the
    pretraining corpus: ``data/eval_texts/<task>.parquet``), or of its ``split`` alone.

    Raises:
        SourceError: the task's data is missing (stage ``downstream@<task>`` makes it), or has no
            text of ``split``.
    """
    path = paths.eval_texts(task)
    if not path.is_file():
        raise SourceError(f"{path} is missing: stage downstream@{task} makes it")
    table = pq.read_table(path)
    texts = [t for t, s in zip(table.column("text").to_pylist(), table.column("split").to_pylist())
             if split in (None, s)]
    if not texts:
        raise SourceError(f"{path} has no {split} text: rerun stage downstream@{task}")
    return texts


def heldout_text(task: str, tokenizer: PreTrainedTokenizerBase, max_seq_length: int,
                 sequences: int, split: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The evaluation text of ``task`` (or of its ``split`` alone) packed into at most ``sequences``
    sequences, in flat layout. A recipe is chosen on ``split="dev"`` (stage ``sweep``), never on
    test text.

    Raises:
        SourceError: the task's data is missing or has no text of ``split``.
    """
    texts = _eval_texts(task, split)
    ids, offsets = pack_by_language(tokenizer, [task] * len(texts), texts, max_seq_length)[task]
    n = min(sequences, len(offsets) - 1)
    return ids[:offsets[n]], offsets[:n + 1]


def mac_text(task: str, tokenizer: PreTrainedTokenizerBase, max_seq_length: int, sequences: int, *,
             scheme: str, ngram_probs: tuple[float, ...], lexicon: Path, hmm: bool, user_dict: str | None,
             split: str | None = None) -> tuple[np.ndarray, np.ndarray, MacCorruption]:
    """:func:`heldout_text` for Mac's measure: the text segmented by jieba as stage ``segment`` does
    (``hmm``, ``user_dict``), tokenized with each token's word and lexicon entry
    (``lexicon``: ``data/similar_words/lexicon.parquet``), packed so that no word is cut
    (:mod:`tasks.pretraining.packing`). Returns the ids, the offsets and the :class:`MacCorruption`.

    Raises:
        SourceError: the task's data or the lexicon is missing.
    """
    if not lexicon.is_file():
        raise SourceError(f"{lexicon} is missing: stage similar_words makes it")
    texts = [t for t in _eval_texts(task, split) if t]
    words = segment_shard(pa.table({"text": texts}), 0, (user_dict, hmm)).column("words")
    ids, word_ids = tokenize_words(tokenizer, texts, words.to_pylist())
    lexicon_table = pq.read_table(lexicon)
    lex = lexicon_ids(words, pa.chunked_array([pa.array(word_ids, type=pa.list_(pa.int32()))]), lexicon_table)
    keep = [i for i, x in enumerate(ids) if len(x)]
    packed = pack_documents([task] * len(keep), [ids[i] for i in keep], [word_ids[i] for i in keep], max_seq_length,
                            tokenizer.cls_token_id, tokenizer.sep_token_id, lex_ids=[lex[i] for i in keep])
    n = min(sequences, len(packed))
    valid, offsets = _flat_layout(packed.lengths[:n], packed.input_ids.shape[1])
    mac = MacCorruption(words=packed.word_ids[:n][valid], lex_ids=packed.lex_ids[:n][valid],
                        similar=similar_words_from_table(lexicon_table), random_token_ids=random_token_ids(tokenizer),
                        scheme=scheme, ngram_probs=tuple(ngram_probs))
    return packed.input_ids[:n][valid], offsets, mac


def corpus_unigram(tokens: Path, vocab_size: int) -> np.ndarray:
    """:func:`tasks.pretraining.gates.unigram_log_probs` of the token ids of the pretraining corpus
    (``data/tokens/sentences.parquet``, column ``input_ids``), read in row groups."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for batch in pq.ParquetFile(tokens).iter_batches(columns=["input_ids"]):
        values = np.asarray(batch.column(0).values)
        counts += np.bincount(values, minlength=vocab_size)[:vocab_size]
    return unigram_log_probs(counts)


def heldout_point(folder: Path, measure,  ids: np.ndarray, offsets: np.ndarray, unigram: np.ndarray,
                  masks: dict) -> dict:
    """The held-out measure of the model saved in ``folder`` (``measure``: a
    :class:`tasks.pretraining.objectives.base.Measure`; None: it has none, only the collapse gate) and its
    gates: the measure's, and the collapse gate on its encoder's token states.

    Args:
        masks: the keyword arguments of :func:`evaluate_mlm` (``heldout_inputs`` of
            :class:`tasks.pretraining.objectives.PretrainingObjective`).
    Returns:
        A :class:`tasks.core.metrics.pretraining.CurvePoint`'s fields but ``fraction``, and
        ``predictions``: the positions measured (None without a measure).
    """
    models = measure.load(folder) if measure else {}
    return measure_models(measure, models, AutoModel.from_pretrained(folder), ids, offsets, unigram, masks)


def measure_models(measure, models: dict[str, PreTrainedModel], encoder: PreTrainedModel,
                   ids: np.ndarray, offsets: np.ndarray, unigram: np.ndarray, masks: dict) -> dict:
    """:func:`heldout_point` of models in memory (a sweep's setting measures the model it just trained):
    ``models`` those ``measure`` reads (as its ``load`` returns them), ``encoder`` the encoder whose token states the
    collapse gate reads. Returns what :func:`heldout_point` does."""
    point, gates = measure.evaluate(models, ids, offsets, masks, unigram) if measure else ({}, [])
    gates = [*gates, collapse_gate(*token_state_sums(encoder, ids, offsets, masks["device"]))]
    return {"loss": None, "accuracy": None, "predictions": None, **point, "sequences": len(offsets) - 1,
            "gates": [g.record() for g in gates]}
