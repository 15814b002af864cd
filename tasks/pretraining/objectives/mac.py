"""Mac, MLM as correction (MacBERT, Cui et al. 2020, §3.2): a chosen word becomes a similar word of the
same token length (stage ``similar_words``; a random word where it has none), never [MASK]. Its data
carries each token's jieba word and lexicon entry, and its held-out measure corrupts the held-out
text the same way (:func:`tasks.pretraining.heldout.mac_text`), where copying the input is a trivial
solution beside the top token (:func:`tasks.pretraining.gates.mlm_gates`)."""

from __future__ import annotations

from tasks.core import paths
from tasks.core.params import Objective
from tasks.pretraining.objectives.base import Kind


class Mac(Kind):
    name = "mac"
    needs_lexicon = True

    def applies(self, spec: Objective) -> bool:
        return spec.replacement.similar > 0

    def heldout(self, params, spec: Objective, tokenizer, split: str | None):
        from tasks.pretraining.heldout import mac_text

        cfg, data = params.curves, params.pretraining_data
        ids, offsets, mac = mac_text(cfg.heldout_task, tokenizer, data.max_seq_length, cfg.heldout_sequences,
                                     scheme=spec.masking, ngram_probs=tuple(data.ngram_probabilities),
                                     lexicon=paths.LEXICON, hmm=params.segment.hmm, user_dict=params.segment.user_dict,
                                     split=split)
        return ids, offsets, {"mac": mac}
