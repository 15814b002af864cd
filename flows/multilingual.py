"""Stage ``multilingual``: the documents of every language input, cleaned, deduplicated and
split into train and held-out (``data/multilingual/documents.parquet``). Inputs whose
optional source was not acquired are skipped and reported, never silently. Out-of-core: the
corpus is streamed and the output written in row groups of ``shards.rows`` rows."""

import sys

from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, read_json
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.multilingual import MultilingualMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.multilingual.multilingual import build_documents, iter_inputs


@flow(name="multilingual")
def multilingual() -> None:
    params = load_params()
    spec = params.multilingual
    logger = get_run_logger()
    missing_sources = {e["source"]: e["missing"] for e in read_json(paths.MANIFEST).get("missing", [])}
    corpus = paths.CORPUS if any(i.format == "corpus" for i in spec.inputs) else None
    present, missing = [], []
    # the documents of each input are read only when build_documents iterates them
    for item, origin, docs, reason in iter_inputs(spec, paths.RAW, corpus, missing_sources, params.shards.rows):
        if docs is None:
            logger.warning(f"{item.lang}: input from source {item.source!r} skipped: {reason}")
            missing.append({"lang": item.lang, "source": item.source, "files": item.files, "reason": reason})
        else:
            present.append((item, origin, docs))
    with atomic_outputs(paths.MULTILINGUAL, paths.stage_metrics("multilingual")) as (out, metrics):
        languages = build_documents(present, spec, params.seed, out, params.shards.rows)
        declared = list(dict.fromkeys(i.lang for i in spec.inputs))
        absent = [lang for lang in declared if lang not in languages]
        if absent:
            logger.warning(f"languages with no document (their sources are missing): {', '.join(absent)}")
        for lang, s in languages.items():
            logger.info(f"{lang} ({s['script']}): {s['documents']} documents, {s['characters']} characters")
        write_metrics(metrics, MultilingualMetrics(languages=languages, missing_inputs=missing,
                                                   absent_languages=absent))


if __name__ == "__main__":
    run_stage(multilingual, *sys.argv[1:])
