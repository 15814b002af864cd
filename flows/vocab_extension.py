"""Stage ``vocab_extension``: per-language coverage of the Chinese BERT vocabulary and of the
base model's tokenizer; WordPiece tokens learnt on the poorly covered languages are appended
to the base tokenizer (``models/tokenizer_multilingual``), and coverage measured again."""

import sys

from prefect import flow, get_run_logger
from transformers import BertTokenizerFast  # not AutoTokenizer, which imports torch

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.multilingual import VocabExtensionMetrics
from tasks.core.params import load_params
from tasks.core.paths import source_file
from tasks.core.stage import run_stage
from tasks.corpus.tokenize import load_vocab_tokenizer
from tasks.multilingual.multilingual import documents_by_language, read_documents
from tasks.multilingual.vocabulary import coverage, extension_tokens, multilingual_tokenizer, vocabulary


@flow(name="vocab_extension")
def vocab_extension() -> None:
    params = load_params()
    spec = params.multilingual
    logger = get_run_logger()
    train = documents_by_language(read_documents(paths.MULTILINGUAL, "train"))
    heldout = documents_by_language(read_documents(paths.MULTILINGUAL, "heldout"))
    chinese_bert = load_vocab_tokenizer(source_file(paths.RAW, spec.vocab.coverage_vocab, "vocab.txt"))
    base = BertTokenizerFast.from_pretrained(paths.TOKENIZER)  # the tokenizer of every pipeline model
    base_vocab = vocabulary(base)
    # Languages are chosen on training text; coverage is reported on held-out text.
    train_unk = {lang: coverage(base, texts)["unk_rate"] for lang, texts in train.items()}
    poor = [lang for lang, rate in train_unk.items() if rate > spec.vocab.unk_rate_threshold]
    logger.info(f"[UNK] rate of the base tokenizer on training text: {train_unk}; extending for {poor}")
    new = extension_tokens(base_vocab, [t for lang in poor for t in train[lang]],
                           spec.vocab.new_vocab_size, spec.vocab.min_frequency)
    extended = multilingual_tokenizer(base_vocab + new)
    report = {lang: {name: coverage(tok, heldout.get(lang) or train[lang])
                     for name, tok in (("chinese_bert", chinese_bert), ("base", base), ("extended", extended))}
              for lang in train}
    for lang, r in report.items():
        logger.info(f"{lang}: [UNK] rate {r['base']['unk_rate']:.3f} -> {r['extended']['unk_rate']:.3f}, "
                    f"tokens/char {r['base']['tokens_per_char']:.2f} -> {r['extended']['tokens_per_char']:.2f}")
    stats = {"base_vocab_size": len(base_vocab),
             "chinese_bert_vocab_size": len(chinese_bert), "extended_languages": poor,
             "train_unk_rate": train_unk, "new_tokens": len(new), "extended_vocab_size": len(extended),
             "new_token_examples": new[:40], "coverage": report}
    with atomic_outputs(paths.MULTILINGUAL_TOKENIZER, paths.stage_metrics("vocab_extension")) as (out, metrics):
        extended.save_pretrained(out)
        write_metrics(metrics, VocabExtensionMetrics(**stats))


if __name__ == "__main__":
    run_stage(vocab_extension, *sys.argv[1:])
