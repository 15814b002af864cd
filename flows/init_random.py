"""Stage ``init_random``: the random-init baseline, saved like a pretrained model.

Same architecture and tokenizer as the pretrained encoders, weights from BERT's
initialiser with the pipeline seed: fine-tuning it shows what pretraining buys.
"""

import sys

from prefect import flow
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.pretraining.modeling import bert_config, new_masked_lm


@flow(name="init_random")
def init_random() -> None:
    params = load_params()
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    config = bert_config(params.model, len(tokenizer), params.pretraining_data.max_seq_length,
                         tokenizer.pad_token_id)
    model = new_masked_lm(config, params.seed, params.model.sinusoidal_position_amplitude)
    with atomic_outputs(paths.MODELS / "random") as (out,):
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)


if __name__ == "__main__":
    run_stage(init_random, *sys.argv[1:])
