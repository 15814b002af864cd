"""Scale benchmark of the data stages (issue 17): wall time, characters/s and peak RSS of each
data stage on the default corpus made 1x, 4x and 16x larger; 1 vs 2 executor workers; and
pretraining tokens/s at 1 vs 2 DDP processes.

What is measured, and how
-------------------------
* **Inputs.** The main project's own artifacts (``dvc checkout`` or ``make repro`` first):
  ``data/corpus/sentences.parquet`` (and, for ``ingest``, ``corpora/raw``). With
  ``--base-fraction f`` the corpus is first cut to its first ``f`` of rows (extended to the end
  of the last document) and the raw People's Daily / sentiment files to their first ``f`` of
  lines: the figures at ``f`` then mean "``f`` x the default corpus" as 1x. Scale ``k`` is ``k``
  copies of that base. Copies are made distinct so no dedupe can drop them: copy ``c >= 1``
  prefixes every sentence (corpus) or every paragraph line and review line (raw files, first word
  of the line for People's Daily) with one rare CJK Extension A ideograph ``chr(0x3400 + c)``,
  and corpus copies get ``doc_id`` ``<doc_id>~<c>``. Copy 0 is the corpus unchanged. The scaled
  corpus is written in row groups of ``shards.rows`` rows at every scale (same layout at every
  scale). Each scale runs in its own temporary project folder (``params.yaml`` = the main one
  with ``executor``/``distributed``/``pretrain.token_budget``
  overridden, ``corpora/raw`` and ``data/downstream`` linked or scaled, ``models/tokenizer_multilingual``
  linked), with cwd = that folder and ``PYTHONPATH`` = the repository, so
  ``tasks/core/paths.py``'s relative paths land there.
* **Stages**, each its real command ``python -m flows.<stage> [arg]`` in a subprocess against one
  shared Prefect server started here (no per-stage temporary server). Chained as the pipeline
  chains them: ``segment`` (scaled corpus) -> ``tokenize`` -> ``similar_words``, ``pretraining_data mlm``;
  ``multilingual`` (scaled corpus as the Mandarin input; the other languages' raw files stay 1x,
  so its input grows less than ``k`` x) -> ``resample resampled`` (with the main project's
  ``models/tokenizer_multilingual``; ``vocab_extension`` is not run). ``ingest`` runs on the
  scaled raw files; its output is not fed on (segment reads the scaled corpus parquet). In a
  marked copy the first sentence of an evaluation review no longer matches the evaluation text,
  so ingest keeps slightly more than ``k`` x the 1x sentences (``sentences`` is recorded).
* **Wall time**: of the whole process (interpreter start-up, imports and Prefect flow set-up
  included: a few seconds per stage, which flatters the 16x/1x wall ratio at small sizes).
* **Characters/s**: characters of the stage's input text / wall: the corpus sentences for
  ``segment``, ``tokenize``, ``similar_words`` and ``pretraining_data`` (the text behind the
  tokens); the kept sentences for ``ingest`` (its output: the raw files carry POS tags); the
  output documents for ``multilingual``; the train-split documents for ``resample``.
* **Peak RSS** (psutil, polled every 50 ms): ``peak_rss_mb`` = the largest sum of RSS over the
  stage process and all its descendants (pool or Dask workers) at one poll; pages shared by
  forked workers are counted once per process, so this overstates the true footprint of a
  process pool. ``peak_rss_max_process_mb`` = the largest single process. A spike shorter than
  50 ms can be missed. The acceptance check uses ``peak_rss_mb``.
* **Workers**: every stage runs with ``executor: processes, workers: 2`` at every scale; at
  ``--worker-scales`` (default 1x) the stages that use ``executor.workers`` (``segment``,
  ``tokenize``, ``pretraining_data``) run again with 1 worker, and with ``--executors ...
  local_cluster`` (the default) also on a Dask ``LocalCluster`` of 1 and 2 workers.
* **Pretraining**: the real ``pretrain mlm`` stage on the 1x (smallest-scale) ``pretraining_data``
  output with ``pretrain.token_budget = --pretrain-tokens`` and the same global batch
  (``pretrain.batch_size``), ``distributed.nproc_per_node`` 1 then 2 (torchrun, gloo).
  ``OMP_NUM_THREADS`` = 2 for 1 process and 1 for each of 2 processes (the same 2 cores).
  tokens/s is the stage's own figure (``metrics/pretrain/mlm.json``: non-padding tokens over the
  training loop, start-up excluded) and ``steady_tokens_per_sec`` from its log CSV (first log
  window, with its one-off warm-up, excluded too: use it when the budget is small); efficiency
  = tokens/s(2) / (2 x tokens/s(1)) (``steady_efficiency``: the same on steady figures), with the
  caveat that "1 process" already uses both cores through 2 threads, so the ideal is
  not 2x: 2 ranks with 1 thread each against 1 rank with 2 threads is the honest comparison on
  this machine (a speed-up above 1 means DDP beats intra-op threading here).

Caveats: timings compare only on the same machine (``benchmarks/results/scale.json`` records it);
on a shared 2-core machine other load shows up directly in wall time; the marker character
adds up to ``k - 1`` rare characters to the tokenizer's training text and the lexicon.

Acceptance (issue 17): every data stage's peak RSS at 16x <= 1.3 x its peak at 1x, and wall time
at 16x <= 18 x the time at 1x. With other scales the ratios are of the largest to the smallest
scale, against 1.3 and 18/16 x (k_max/k_min). Every stage streams its corpus; what still grows
with it: ``ingest`` a 64-bit dedupe hash per kept document, ``multilingual`` the same per language
plus a held-out flag, ``similar_words`` the distinct words (Heaps' law: far slower than the
corpus), ``resample`` 12 bytes per train document and the drawn documents (bounded by
``multilingual.total_tokens``, not by the corpus).

Usage (after ``dvc checkout`` / ``make repro``)::

    python benchmarks/scale.py [--base-fraction 1.0] [--scales 1 4 16] [--worker-scales 1]
                               [--executors processes local_cluster] [--pretrain-tokens 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.core import paths  # noqa: E402
from tasks.orchestration.prefect_server import prefect_server  # noqa: E402
from tasks.pretraining.recipe import write_choice  # noqa: E402

from results import write_results  # noqa: E402  (benchmarks/results.py; scripts run from their folder)

STAGE_ORDER = ["ingest", "segment", "tokenize", "similar_words", "pretraining_data", "multilingual", "resample"]
EXECUTOR_STAGES = {"segment", "tokenize", "pretraining_data"}  # run by the `executor` block: rerun at the worker scales
INGEST_FILES = [("peoples_daily", "199801.txt"), ("sentiment", "pos.txt"), ("sentiment", "neg.txt")]
POLL = 0.05


def marker(copy: int) -> str:
    """The prefix that makes copy ``copy`` distinct (copy 0: none)."""
    return chr(0x3400 + copy) if copy else ""


# --------------------------------------------------------------------------- inputs


def base_corpus(fraction: float) -> pa.Table:
    """The main corpus cut to its first ``fraction`` of rows, to the end of the last document."""
    table = pq.read_table(ROOT / paths.CORPUS)
    if fraction >= 1:
        return table
    n = max(1, round(fraction * table.num_rows))
    docs = table.column("doc_id").to_pylist()
    while n < len(docs) and docs[n] == docs[n - 1]:
        n += 1
    return table.slice(0, n)


def write_scaled_corpus(base: pa.Table, k: int, out: Path, row_group: int) -> int:
    """``k`` distinct copies of ``base`` into ``out`` (row groups of ``row_group`` rows); returns characters."""
    out.parent.mkdir(parents=True, exist_ok=True)
    chars = 0
    with pq.ParquetWriter(out, base.schema, compression="zstd") as writer:
        for c in range(k):
            t = base
            if c:
                doc = pc.binary_join_element_wise(t.column("doc_id"), pa.scalar(f"~{c}"), "")
                text = pc.binary_join_element_wise(pa.scalar(marker(c)), t.column("text"), "")
                t = t.set_column(t.schema.get_field_index("doc_id"), "doc_id", doc)
                t = t.set_column(t.schema.get_field_index("text"), "text", text)
            chars += pc.sum(pc.utf8_length(t.column("text"))).as_py()
            writer.write_table(t, row_group_size=row_group)
    return chars


def scaled_lines(src: Path, dst: Path, k: int, fraction: float) -> None:
    """The first ``fraction`` of ``src``'s lines, ``k`` times, copies made distinct by a marker."""
    lines = src.read_text(encoding="utf-8").splitlines()
    lines = lines[:max(1, round(fraction * len(lines)))] if fraction < 1 else lines
    dst.parent.mkdir(parents=True, exist_ok=True)
    with dst.open("w", encoding="utf-8") as f:
        for c in range(k):
            m = marker(c)
            for line in lines:
                if m and line.strip():  # People's Daily: the marker joins the first word (word/POS stays valid)
                    line = m + line.lstrip()
                f.write(line + "\n")


def make_project(folder: Path, base: pa.Table, k: int, fraction: float, params: dict) -> int:
    """A project folder for scale ``k``: params, scaled corpus and raw files, links to the rest."""
    raw = folder / paths.RAW
    raw.mkdir(parents=True)
    for source in sorted((ROOT / paths.RAW).iterdir()):
        if source.name in {s for s, _ in INGEST_FILES}:
            continue
        (raw / source.name).symlink_to(source)
    for source, file in INGEST_FILES:
        scaled_lines(ROOT / paths.RAW / source / file, raw / source / file, k, fraction)
    shutil.copy(ROOT / paths.MANIFEST, folder / paths.MANIFEST)
    (folder / paths.DOWNSTREAM).parent.mkdir(parents=True, exist_ok=True)
    (folder / paths.DOWNSTREAM).symlink_to(ROOT / paths.DOWNSTREAM)
    (folder / paths.MULTILINGUAL_TOKENIZER).parent.mkdir(parents=True, exist_ok=True)
    (folder / paths.MULTILINGUAL_TOKENIZER).symlink_to(ROOT / paths.MULTILINGUAL_TOKENIZER)
    shutil.copy(ROOT / "dvc.yaml", folder / "dvc.yaml")
    write_params(folder, params)
    return write_scaled_corpus(base, k, folder / "corpus.parquet", params["shards"]["rows"])


def write_params(folder: Path, params: dict, workers: int = 2, kind: str = "processes", nproc: int = 1) -> None:
    p = json.loads(json.dumps(params))
    p["executor"].update(kind=kind, workers=workers, address=None)
    if "workers" in p["pretraining_data"]:  # older params: pretraining_data's own pool size
        p["pretraining_data"]["workers"] = workers
    p["distributed"]["nproc_per_node"] = nproc
    (folder / "params.yaml").write_text(yaml.safe_dump(p, allow_unicode=True, sort_keys=False), encoding="utf-8")


def text_chars(path: Path, column: str = "text", split: str | None = None) -> int:
    n = 0
    cols = [column] + (["split"] if split else [])
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1 << 15, columns=cols):
        col = batch.column(0)
        if split:
            col = pc.filter(col, pc.equal(batch.column(1), split))
        n += pc.sum(pc.utf8_length(col)).as_py() or 0
    return n


# --------------------------------------------------------------------------- measuring


def run_measured(cmd: list[str], cwd: Path, env: dict, log: Path) -> dict:
    """Run ``cmd``; wall time and the peak RSS of its process tree (psutil polling)."""
    peak_sum = peak_one = 0
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                procs = []
            rss = []
            for p in procs:
                try:
                    rss.append(p.memory_info().rss)
                except psutil.Error:
                    pass
            if rss:
                peak_sum, peak_one = max(peak_sum, sum(rss)), max(peak_one, max(rss))
            time.sleep(POLL)
        wall = time.perf_counter() - t0
    if proc.returncode:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        sys.exit(f"{' '.join(cmd)} failed (exit {proc.returncode}) in {cwd}:\n" + "\n".join(tail))
    return {"wall_sec": round(wall, 2), "peak_rss_mb": round(peak_sum / 2**20, 1),
            "peak_rss_max_process_mb": round(peak_one / 2**20, 1)}


def steady_tokens_per_sec(log_csv: Path) -> float | None:
    """tokens/s between the first and the last log row of a pretrain log (start-up and the first
    window, with its one-off warm-up, excluded); None with fewer than 2 rows."""
    import csv

    rows = list(csv.DictReader(log_csv.open()))
    if len(rows) < 2:
        return None
    a, b = rows[0], rows[-1]
    seconds = float(b["elapsed_sec"]) - float(a["elapsed_sec"])
    return round((float(b["tokens"]) - float(a["tokens"])) / seconds, 1) if seconds > 0 else None


SEED = "42"  # the pretraining seed of the measured pretraining_data and pretrain runs (params pretrain.seeds)


def stage_command(stage: str) -> list[str]:
    arg = {"pretraining_data": ["mlm", SEED], "resample": ["resampled"], "pretrain": ["mlm", SEED]}.get(stage, [])
    return [sys.executable, "-m", f"flows.{stage}", *arg]


def input_chars(stage: str, folder: Path, corpus_chars: int) -> int:
    if stage == "ingest":
        return text_chars(folder / "ingest-out.parquet")
    if stage == "multilingual":
        return text_chars(folder / paths.MULTILINGUAL)
    if stage == "resample":
        return text_chars(folder / paths.MULTILINGUAL, split="train")
    return corpus_chars


def run_stage(stage: str, folder: Path, env: dict, corpus_chars: int) -> dict:
    corpus = folder / paths.CORPUS
    if stage == "ingest":  # ingest writes data/corpus: keep the scaled corpus aside meanwhile
        corpus.unlink(missing_ok=True)
    else:
        corpus.parent.mkdir(parents=True, exist_ok=True)
        if not corpus.exists():
            os.link(folder / "corpus.parquet", corpus)
    fig = run_measured(stage_command(stage), folder, env, folder / "stages.log")
    if stage == "ingest":
        corpus.rename(folder / "ingest-out.parquet")
        fig["sentences"] = pq.ParquetFile(folder / "ingest-out.parquet").metadata.num_rows
    chars = input_chars(stage, folder, corpus_chars)
    fig.update(chars=chars, chars_per_sec=round(chars / fig["wall_sec"]))
    return fig


# --------------------------------------------------------------------------- the benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-fraction", type=float, default=1.0,
                        help="1x = this fraction of the default corpus (figures then mean f x default)")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--worker-scales", type=int, nargs="*", default=[1],
                        help="scales at which the executor stages also run with 1 worker")
    parser.add_argument("--executors", nargs="+", default=["processes", "local_cluster"],
                        choices=["processes", "local_cluster"])
    parser.add_argument("--stages", nargs="+", default=STAGE_ORDER, choices=STAGE_ORDER)
    parser.add_argument("--pretrain-tokens", type=int, default=200_000,
                        help="pretrain.token_budget of each DDP run (0: skip pretraining)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary project folders")
    args = parser.parse_args()
    if not (ROOT / paths.CORPUS).exists():
        sys.exit(f"{ROOT / paths.CORPUS} is missing: run `dvc checkout` (or `make repro`) first")
    scales = sorted(set(args.scales))
    stages = [s for s in STAGE_ORDER if s in args.stages]
    if "resample" in stages and "multilingual" not in stages:
        sys.exit("resample reads multilingual's output: keep multilingual in --stages")
    if {"tokenize", "similar_words", "pretraining_data"} & set(stages) and "segment" not in stages:
        sys.exit("tokenize, similar_words and pretraining_data read segment's output: keep segment in --stages")
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    params["pretrain"].update(token_budget=max(args.pretrain_tokens, 1), checkpoint_every=10**9, seeds=[int(SEED)],
                              snapshots=[])
    base = base_corpus(args.base_fraction)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="zhplm-scale-"))
    prefect_home = work / "prefect-home"
    prefect_home.mkdir()
    os.environ["PREFECT_HOME"] = str(prefect_home)
    stage_figs: dict[str, dict] = {s: {} for s in stages}
    worker_figs: dict[str, dict] = {}
    pretrain_figs: dict = {}
    try:
        with prefect_server() as api_url:
            env = {**os.environ, "PREFECT_API_URL": api_url, "PYTHONPATH": str(ROOT)}
            for k in scales:
                folder = work / f"scale-{k}"
                corpus_chars = make_project(folder, base, k, args.base_fraction, params)
                print(f"{k}x: {base.num_rows * k:,} sentences, {corpus_chars:,} characters ({folder})", flush=True)
                for stage in stages:
                    fig = run_stage(stage, folder, env, corpus_chars)
                    stage_figs[stage][f"{k}x"] = fig
                    print(f"  {stage:<17} {fig['wall_sec']:>8.1f} s {fig['chars_per_sec']:>10,} chars/s "
                          f"{fig['peak_rss_mb']:>8.0f} MiB (largest process {fig['peak_rss_max_process_mb']:.0f})",
                          flush=True)
                if k in args.worker_scales:
                    for kind in args.executors:
                        for workers in (1, 2):
                            if kind == "processes" and workers == 2:
                                figs = {s: stage_figs[s][f"{k}x"] for s in stages if s in EXECUTOR_STAGES}
                            else:
                                write_params(folder, params, workers=workers, kind=kind)
                                figs = {s: run_stage(s, folder, env, corpus_chars)
                                        for s in stages if s in EXECUTOR_STAGES}
                            for s, fig in figs.items():
                                worker_figs.setdefault(f"{k}x", {}).setdefault(kind, {}).setdefault(s, {})[
                                    str(workers)] = fig
                                print(f"  {s:<17} {kind} x{workers}: {fig['wall_sec']:.1f} s, "
                                      f"{fig['chars_per_sec']:,} chars/s, {fig['peak_rss_mb']:.0f} MiB", flush=True)
                    write_params(folder, params)
                if k == scales[0] and args.pretrain_tokens and "pretraining_data" in stages:
                    # the recipe stage sweep@mlm writes when params declare no sweep.settings (the default run's)
                    (folder / paths.RECIPES).mkdir(parents=True, exist_ok=True)
                    write_choice(folder / paths.RECIPES / "mlm.json", "params", {})
                    for nproc in (1, 2):
                        write_params(folder, params, nproc=nproc)
                        run_env = {**env, "OMP_NUM_THREADS": str(2 // nproc)}
                        fig = run_measured(stage_command("pretrain"), folder, run_env, folder / "stages.log")
                        metrics = json.loads((folder / paths.stage_metrics("pretrain", f"mlm-{SEED}")).read_text())
                        fig.update(tokens=metrics["tokens"], steps=metrics["steps"],
                                   tokens_per_sec=metrics["tokens_per_sec"], train_sec=metrics["wall_sec"],
                                   threads_per_process=metrics["threads"], omp_num_threads=2 // nproc,
                                   steady_tokens_per_sec=steady_tokens_per_sec(
                                       folder / paths.stage_metrics("pretrain", f"mlm-{SEED}", ".csv")))
                        pretrain_figs[f"ddp{nproc}"] = fig
                        print(f"  pretrain mlm, {nproc} DDP process(es) x {2 // nproc} thread(s): "
                              f"{fig['tokens_per_sec']:,.0f} tokens/s ({fig['tokens']:,} tokens, "
                              f"{fig['wall_sec']:.1f} s in all, {fig['peak_rss_mb']:.0f} MiB)", flush=True)
                    write_params(folder, params)
                    one, two = pretrain_figs["ddp1"]["tokens_per_sec"], pretrain_figs["ddp2"]["tokens_per_sec"]
                    pretrain_figs.update(speedup=round(two / one, 3), efficiency=round(two / (2 * one), 3))
                    one, two = (pretrain_figs[f"ddp{n}"]["steady_tokens_per_sec"] for n in (1, 2))
                    if one and two:  # the same without the first log window's warm-up
                        pretrain_figs.update(steady_speedup=round(two / one, 3),
                                             steady_efficiency=round(two / (2 * one), 3))
                if not args.keep:
                    shutil.rmtree(folder)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    # ratios of the largest to the smallest scale, against the acceptance thresholds
    lo, hi = scales[0], scales[-1]
    wall_limit = 18 / 16 * hi / lo
    ratios = {}
    print(f"\n{'stage':<17} {f'RSS {hi}x/{lo}x':>13} {'(<= 1.3)':>8} "
          f"{f'wall {hi}x/{lo}x':>14} {f'(<= {wall_limit:g})':>10}")
    for stage in stages:
        a, b = stage_figs[stage][f"{lo}x"], stage_figs[stage][f"{hi}x"]
        rss, wall = b["peak_rss_mb"] / a["peak_rss_mb"], b["wall_sec"] / a["wall_sec"]
        ratios[stage] = {"rss_ratio": round(rss, 3), "rss_ok": rss <= 1.3,
                         "wall_ratio": round(wall, 3), "wall_ok": wall <= wall_limit}
        print(f"{stage:<17} {rss:>13.2f} {'ok' if rss <= 1.3 else 'FAIL':>8} "
              f"{wall:>14.2f} {'ok' if wall <= wall_limit else 'FAIL':>10}")
    if pretrain_figs:
        print(f"pretrain: {pretrain_figs['ddp1']['tokens_per_sec']:,.0f} tokens/s with 1 process x 2 threads, "
              f"{pretrain_figs['ddp2']['tokens_per_sec']:,.0f} with 2 processes x 1 thread: speed-up "
              f"x{pretrain_figs['speedup']:.2f}, efficiency {pretrain_figs['efficiency']:.2f} (= tokens/s(2) / "
              f"(2 x tokens/s(1)); on 2 cores the 1-process run already uses both cores)")
    total = time.perf_counter() - started
    print(f"total {total:.0f} s")
    settings = {"base_fraction": args.base_fraction, "base_sentences": base.num_rows, "scales": scales,
                "worker_scales": args.worker_scales, "executors": args.executors, "stages": stages,
                "pretrain_tokens": args.pretrain_tokens, "shards_rows": params["shards"]["rows"],
                "thresholds": {"rss_ratio": 1.3, "wall_ratio": round(wall_limit, 3)}, "total_sec": round(total, 1)}
    notes = [
        f"1x = {args.base_fraction} x the default corpus; copy c >= 1 of a scale prefixes every sentence (corpus) "
        "or line (raw files) with chr(0x3400 + c) and suffixes doc_id with ~c, so no dedupe drops it",
        "wall_sec is the whole stage process (start-up, imports, Prefect flow set-up included)",
        "peak_rss_mb: largest sum of RSS over the stage process and its descendants (psutil, 50 ms polls; "
        "pages shared by forked workers count once per process); peak_rss_max_process_mb: largest single process",
        "ingest runs on scaled raw People's Daily and sentiment files; multilingual on the scaled corpus with the "
        "other languages' raw files at 1x (its input grows less than k x); resample on multilingual's output with "
        "the main project's models/tokenizer_multilingual; vocab_extension is not run",
        "every stage streams its corpus; still growing with it: ingest a 64-bit hash per kept document, "
        "multilingual the same per language plus a held-out flag, similar_words the distinct words, resample 12 "
        "bytes per train document plus the drawn documents (bounded by multilingual.total_tokens)",
        "pretrain: real pretrain@mlm stage on the smallest scale's pretraining data, same global batch; "
        "OMP_NUM_THREADS=2 with 1 process, 1 per process with 2; efficiency = tokens/s(2) / (2 x tokens/s(1))",
    ]
    write_results("scale", settings, {"stages": stage_figs, "ratios": ratios, "workers": worker_figs,
                                      "pretrain": pretrain_figs, "notes": notes})


if __name__ == "__main__":
    main()
