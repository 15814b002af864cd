"""The interpretability sections of ``params.yaml``: ``ablation``, ``probe``,
``scalar_mix`` and ``attributions``.

Which models each analysis looks at, on which task, and its own knobs (stages
``ablation``, ``probe``, ``scalar_mix`` and ``attributions``). The values live in
``params.yaml``.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from tasks.core.params.base import INFRASTRUCTURE, _Strict

# The attention zones of Cui et al. 2022 (:mod:`tasks.interpretability.ablation`): [CLS], the middle and
# end [SEP], all special tokens, the diagonal, and question/passage to question/passage.
AttentionZone = Literal["cls", "sep_mid", "sep_end", "special", "diagonal", "q2q", "q2p", "p2q", "p2p"]
ATTENTION_ZONES: tuple[str, ...] = get_args(AttentionZone)


class Ablation(_Strict):
    """Attention-zone ablation (stage ``ablation@<model>``, :mod:`tasks.interpretability.ablation`)."""

    task: str = Field(description="an MRC task of finetune.tasks: the model finetune saved for it (first seed)")
    models: list[str] = Field(description="fine-tuned models (compare or finetune.baselines)")
    split: Literal["dev", "test"] = Field("dev", description="the split the ablated model is scored on")
    per_head_zones: list[AttentionZone] = Field(description="zones also blocked head by head; all zones = the full "
                                                            "grid")


class ProbeSplit(_Strict):
    train: PositiveInt = Field(description="sentences the probe is trained on")
    test: PositiveInt = Field(description="sentences it is scored on")


class Probe(_Strict):
    """Layer-wise linear probes (stage ``probe@<model>``, :mod:`tasks.interpretability.probe`)."""

    models: list[str] = Field(description="pretrained models (compare x seeds, random-<seed>, baselines)")
    pos_source: str = Field(description="a source of gold word/POS lines (People's Daily format)")
    pos_file: str = Field(description="the file of that source")
    ner_task: str = Field(description="an NER task of tasks; its train and dev splits")
    sentences: ProbeSplit = Field(description="sentences per probe for training and testing it")
    max_seq_length: PositiveInt = Field(description="tokens per sentence, longer ones cut")
    batch_size: PositiveInt = Field(description="sentences per forward pass when extracting features",
                                    json_schema_extra=INFRASTRUCTURE)


class ScalarMixParams(_Strict):
    """Frozen encoder + ELMo scalar mix (stage ``scalar_mix@<model>-<task>``, :mod:`tasks.interpretability.scalar_mix`)."""

    models: list[str] = Field(description="pretrained models (compare x seeds, random-<seed>, baselines)")
    tasks: list[str] = Field(description="classification or NER tasks; trained as finetune trains them")
    learning_rate: PositiveFloat = Field(description="for the mix and the head (the encoder is frozen)")


class Attributions(_Strict):
    """Integrated Gradients and attention maps (stage ``attributions@<model>``, :mod:`tasks.interpretability.attributions`)."""

    models: list[str] = Field(description="fine-tuned models (compare x seeds, random-<seed>, baselines)")
    task: str = Field(description="a classification task of finetune.tasks: the model finetune saved for it "
                                  "(first seed)")
    correct: NonNegativeInt = Field(description="the most confident correct dev predictions shown")
    wrong: NonNegativeInt = Field(description="the most confident wrong dev predictions shown")
    max_tokens: PositiveInt = Field(description="only examples this short are shown (readable maps)")
    steps: PositiveInt = Field(description="Integrated Gradients steps (Riemann sum)")
