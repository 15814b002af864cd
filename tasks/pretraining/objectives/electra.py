"""ELECTRA's generator and discriminator (Clark et al. 2020, ICLR; reference ``google-research/electra``): their
configurations and initialisation, how the generator's samples replace the masked tokens, the training loss
(:class:`ElectraPretrainingModel`) and the held-out measure (:func:`evaluate_rtd`). The torch half of the
replaced-token detection kind (:mod:`tasks.pretraining.objectives.rtd`), imported by it alone, when a model is
built or measured.

The discriminator is saved as an ``ElectraForPreTraining`` (``AutoModel`` gives its encoder) and its
generator beside it, in :data:`GENERATOR_DIR`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining, PreTrainedModel

from tasks.core.params import ModelSize
from tasks.pretraining.flops import encoder_flops
from tasks.pretraining.heldout import masked_batches
from tasks.pretraining.initialization import init_positions

GENERATOR_DIR = "generator"  # ELECTRA's generator, beside the discriminator in the model folder


def replace_tokens(ids: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, sampled: torch.Tensor,
                   labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ELECTRA's discriminator input and targets: ``ids`` (``int64 [B, L]``) with the generator's
    ``sampled`` tokens at ``rows, cols`` (``int64 [M]``), and ``bool [B, L]`` True where a token was
    replaced: a sample equal to the original (``labels``) counts as original (Clark et al. 2020, §2)."""
    corrupted = ids.clone()
    corrupted[rows, cols] = sampled
    replaced = torch.zeros_like(ids, dtype=torch.bool)
    replaced[rows, cols] = sampled != labels
    return corrupted, replaced


class ElectraPretrainingModel(nn.Module):
    """ELECTRA's replaced-token detection (Clark et al. 2020, ICLR, §2; reference
    ``google-research/electra``, ``run_pretraining.py``), a
    :class:`tasks.pretraining.modeling.PretrainingModule`.

    A small generator (an MLM) predicts the masked positions; its samples replace them (no
    gradient flows through the sampling); the discriminator classifies every non-padding token as
    original or replaced, a sampled token equal to the original counting as original. Loss = MLM
    loss + λ · RTD loss (binary cross-entropy averaged over the tokens). Generator and
    discriminator share the token, position and token-type embeddings (one module, §3.2).

    Args:
        discriminator: the ``ElectraForPreTraining`` that is pretrained (the saved artifact).
        generator: an ``ElectraForMaskedLM`` with the discriminator's ``embedding_size``; its
            embeddings are replaced by the discriminator's and its output layer tied to them.
        rtd_weight: λ.
    """

    def __init__(self, discriminator: ElectraForPreTraining, generator: ElectraForMaskedLM, rtd_weight: float = 50.0):
        super().__init__()
        generator.electra.embeddings = discriminator.electra.embeddings
        generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
        self.discriminator, self.generator, self.rtd_weight = discriminator, generator, rtd_weight
        self.full_targets = False

    @property
    def hf(self) -> ElectraForPreTraining:
        return self.discriminator

    def saved(self) -> dict[str, nn.Module]:
        return {"": self.discriminator, GENERATOR_DIR: self.generator}

    unused_parameters = False
    predicts_positions = False  # its targets are tokens (generator) and replaced-or-not (discriminator)
    heldout = "rtd"  # the discriminator has no MLM head: held-out replaced-token detection

    def predictions(self, batch: dict[str, torch.Tensor]) -> int:
        """The generator's predictions of a batch: the chosen positions."""
        return len(batch["labels"])

    def losses(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """``(mlm_loss, rtd_loss, parts)``: the generator's MLM loss at the chosen positions, the
        discriminator's mean binary cross-entropy over the non-padding tokens, and the detached
        ``token_loss``, ``token_correct`` (generator), ``rtd_loss``, ``rtd_correct`` (discriminator,
        tokens classified right). Batch as :meth:`PretrainingModel.forward` (no sentence labels)."""
        ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
        rows, cols, labels = batch["rows"], batch["cols"], batch["labels"]
        g = self.generator
        hidden = g.electra(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        logits = g.generator_lm_head(g.generator_predictions(hidden[rows, cols])).float()
        mlm_loss = F.cross_entropy(logits, labels)
        with torch.no_grad():
            sampled = torch.multinomial(F.softmax(logits, dim=-1), 1).squeeze(1)
            corrupted, replaced = replace_tokens(ids, rows, cols, sampled, labels)
        scores = self.discriminator(input_ids=corrupted, attention_mask=mask, token_type_ids=types).logits
        valid = mask.bool()
        rtd_loss = F.binary_cross_entropy_with_logits(scores[valid].float(), replaced[valid].float())
        parts = {"token_loss": mlm_loss.detach(), "token_correct": (logits.argmax(-1) == labels).sum(),
                 "rtd_loss": rtd_loss.detach(), "rtd_correct": ((scores[valid] > 0) == replaced[valid]).sum()}
        return mlm_loss, rtd_loss, parts

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss, parts)`` as :meth:`PretrainingModel.forward`: ``mlm_loss · token_weight +
        λ · rtd_loss · position_weight`` (the weights: the micro-batch's shares of the global batch's
        predictions and tokens under gradient accumulation, else 1)."""
        mlm_loss, rtd_loss, parts = self.losses(batch)
        rtd_loss = rtd_loss * batch.get("position_weight", 1.0)
        parts["rtd_loss"] = rtd_loss.detach()
        return mlm_loss * batch.get("token_weight", 1.0) + self.rtd_weight * rtd_loss, parts

    def extra_heads(self) -> dict[str, torch.Tensor]:
        return {}

    def flops(self, lengths: np.ndarray, predicted: int) -> float:
        """Model FLOPs of one training step, counted as :meth:`PretrainingModel.flops`: the
        discriminator's encoder and its head on every token (dense and a 1-way output), the
        generator's encoder with its embedding projection on every token, and its head (dense to
        the embedding size, then the vocabulary) at the ``predicted`` positions; times 3."""
        d, g = self.discriminator.config, self.generator.config
        tokens = float(np.sum(lengths))
        disc = encoder_flops(d, lengths) + tokens * 2 * (d.hidden_size ** 2 + d.hidden_size)
        gen = encoder_flops(g, lengths) + tokens * 2 * g.embedding_size * g.hidden_size * (
            g.embedding_size != g.hidden_size) + predicted * 2 * (g.hidden_size * g.embedding_size
                                                                  + g.embedding_size * g.vocab_size)
        return 3.0 * (disc + gen)


def electra_configs(size: ModelSize, generator_size: float, vocab_size: int, max_seq_length: int,
                    pad_token_id: int = 0) -> tuple[ElectraConfig, ElectraConfig]:
    """``(discriminator, generator)`` configurations: the discriminator of ``size`` (embeddings of
    its hidden size), the generator with ``generator_size`` of its hidden size, FFN size and heads
    (ELECTRA's ``generator_hidden_size``, §3.2; at least one head) and the same embeddings."""
    common = dict(vocab_size=vocab_size, embedding_size=size.hidden_size, num_hidden_layers=size.num_hidden_layers,
                  hidden_dropout_prob=size.hidden_dropout_prob,
                  attention_probs_dropout_prob=size.attention_probs_dropout_prob,
                  max_position_embeddings=max_seq_length, type_vocab_size=2, pad_token_id=pad_token_id)
    heads = max(1, round(size.num_attention_heads * generator_size))
    hidden = max(heads, round(size.hidden_size * generator_size / heads) * heads)
    return (ElectraConfig(hidden_size=size.hidden_size, num_attention_heads=size.num_attention_heads,
                          intermediate_size=size.intermediate_size, **common),
            ElectraConfig(hidden_size=hidden, num_attention_heads=heads,
                          intermediate_size=max(1, round(size.intermediate_size * generator_size)), **common))


def new_electra(size: ModelSize, rtd, vocab_size: int, max_seq_length: int, pad_token_id: int,
                seed: int) -> ElectraPretrainingModel:
    """A randomly initialised ELECTRA (normal, std 0.02; positions and the locality prior of both
    encoders as :func:`tasks.pretraining.modeling.new_masked_lm`) with the generator of
    ``rtd.generator_size`` and λ = ``rtd.weight``."""
    disc_config, gen_config = electra_configs(size, rtd.generator_size, vocab_size, max_seq_length, pad_token_id)
    torch.manual_seed(seed)
    discriminator, generator = ElectraForPreTraining(disc_config), ElectraForMaskedLM(gen_config)
    init_positions(discriminator.electra.embeddings, [discriminator.electra, generator.electra],
                   amplitude=size.sinusoidal_position_amplitude, local_layers=size.local_attention_layers,
                   local_strength=size.local_attention_strength,
                   head_size=disc_config.hidden_size // disc_config.num_attention_heads)
    return ElectraPretrainingModel(discriminator, generator, rtd.weight)


@torch.no_grad()
def evaluate_rtd(discriminator: PreTrainedModel, generator: PreTrainedModel, ids: np.ndarray, offsets: np.ndarray,
                 *, lang: str, seed: int, mask_token_id: int, masked_lm_prob: float, max_predictions: int,
                 device: torch.device, batch_size: int = 32) -> dict:
    """ELECTRA's held-out measure: the [MASK] positions of :func:`tasks.pretraining.heldout.evaluate_mlm`
    (the same for every model), filled with ``generator``'s samples (an ``ElectraForMaskedLM``; drawn from a
    torch generator seeded by ``seed``), scored by ``discriminator`` (an ``ElectraForPreTraining``) on every
    token, binary cross-entropy and accuracy over them (Clark et al. 2020, §2).

    Returns:
        ``{"tokens", "rtd_loss", "rtd_accuracy", "sample_match"}`` (binary cross-entropy in nats per
        token; the share of samples equal to the original token; None without a masked token) and
        ``"tokens_measured"``: ``{"losses", "scores", "targets", "rows"}``, ``[T]`` arrays of every
        token (discriminator logits, replaced or not, the sequence of each), for
        :func:`tasks.pretraining.objectives.rtd.rtd_gates`.
    """
    discriminator.to(device).eval()
    generator.to(device).eval()
    draws = torch.Generator(device=device).manual_seed(seed)
    parts = {"losses": [], "scores": [], "targets": [], "rows": []}
    matched, sampled_count = 0, 0
    for input_ids, valid, rows, cols, labels, _, start in masked_batches(
            ids, offsets, lang, seed, mask_token_id, masked_lm_prob, max_predictions, batch_size, device):
        hidden = generator.electra(input_ids=input_ids, attention_mask=valid).last_hidden_state
        logits = generator.generator_lm_head(generator.generator_predictions(hidden[rows, cols])).float()
        sampled = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=draws).squeeze(1)
        matched, sampled_count = matched + int((sampled == labels).sum()), sampled_count + len(labels)
        corrupted, replaced = replace_tokens(input_ids, rows, cols, sampled, labels)
        mask = valid.bool()
        scores = discriminator(input_ids=corrupted, attention_mask=valid).logits[mask].float()
        target = replaced[mask]
        parts["losses"].append(F.binary_cross_entropy_with_logits(scores, target.float(), reduction="none")
                               .double().cpu())
        parts["scores"].append(scores.cpu())
        parts["targets"].append(target.cpu())
        parts["rows"].append(mask.nonzero()[:, 0].cpu() + start)
    if not parts["losses"]:
        return {"tokens": 0, "rtd_loss": None, "rtd_accuracy": None, "sample_match": None}
    arrays = {k: torch.cat(v).numpy() for k, v in parts.items()}
    return {"tokens": len(arrays["losses"]), "rtd_loss": float(arrays["losses"].sum()) / len(arrays["losses"]),
            "rtd_accuracy": float(((arrays["scores"] > 0) == arrays["targets"]).mean()),
            "sample_match": matched / sampled_count, "tokens_measured": arrays}
