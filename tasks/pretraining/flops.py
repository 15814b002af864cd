"""Model FLOPs of the encoders, counted from their configs as MFU counts them: the unit of the
``mlm_flops`` budget (equal compute) and of the report's score-for-compute curves."""

from __future__ import annotations

import numpy as np
from transformers import BertConfig


def encoder_flops(config: BertConfig, lengths: np.ndarray) -> float:
    """Forward FLOPs of a BERT encoder on sequences of ``lengths`` tokens (``int [B]``), counted
    from the config as MFU counts them (a multiply-add is 2 FLOPs; Kaplan et al. 2020, §2.1;
    PaLM, appendix B): per token and layer, the Q, K, V and output projections ``2·4·H²``, the FFN
    ``2·2·H·I``, and the attention scores and their weighted sum ``2·2·T·H`` over its row's ``T``
    tokens; embeddings, LayerNorm and softmax are left out.

    Returns:
        FLOPs (a float: bert-base steps exceed 2^53 only after 10^5 of them).
    """
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    lengths = np.asarray(lengths, dtype=np.float64)
    return float(layers * (lengths.sum() * 2 * (4 * h * h + 2 * h * i) + (lengths ** 2).sum() * 4 * h))


def mlm_flops(config, lengths: np.ndarray, predicted: int) -> float:
    """Model FLOPs of one MLM training step (:meth:`PretrainingModel.flops` of a plain MLM with an
    encoder of ``config``'s size): the reference of the ``mlm_flops`` budget."""
    h = config.hidden_size
    return 3.0 * (encoder_flops(config, lengths) + predicted * 2 * (h * h + h * config.vocab_size))
