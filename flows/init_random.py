"""Stage ``init_random@<seed>``: the random-init baseline of pretraining seed ``seed``, saved like a
pretrained model (``models/random-<seed>``).

Same architecture and tokenizer as the pretrained encoders, and the very weights each of them
starts from under the same seed (BERT's initialiser, seeded with ``seed``): fine-tuning it shows
what pretraining buys, paired seed by seed.
"""

import sys

from prefect import flow
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.model_dir import save_model_folder
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.pretraining.modeling import bert_config, new_masked_lm


@flow(name="init_random")
def init_random(seed: str) -> None:
    params, seed = load_params(), int(seed)
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    config = bert_config(params.model, len(tokenizer), params.pretraining_data.max_seq_length,
                         tokenizer.pad_token_id)
    model = new_masked_lm(config, seed, params.model)
    with atomic_outputs(paths.MODELS / paths.seeded("random", seed)) as (out,):
        save_model_folder(model, tokenizer, out)


if __name__ == "__main__":
    run_stage(init_random, *sys.argv[1:])
