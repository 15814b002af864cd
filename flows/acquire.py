"""Stage ``acquire``: materialise every declared source into ``corpora/raw`` with a manifest."""

import sys

from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_json
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.corpus.acquire import acquire_source, check_source_paths


@flow(name="acquire")
def acquire() -> None:
    params = load_params()
    for name, spec in params.sources.items():  # every source is checked before any is fetched
        check_source_paths(name, spec)
    with atomic_outputs(paths.RAW, paths.MANIFEST) as (raw, manifest):
        futures = [acquire_source.submit(name, spec, raw) for name, spec in sorted(params.sources.items())]
        entries = [entry for future in futures for entry in future.result()]
        missing = [e for e in entries if "missing" in e]
        files = [e for e in entries if "missing" not in e]
        for entry in files:
            entry["path"] = (paths.RAW / entry["source"] / entry["file"]).as_posix()
        for entry in missing:
            get_run_logger().warning(f"optional source missing: {entry['missing']}")
        write_json(manifest, {"files": files, "missing": missing})


if __name__ == "__main__":
    run_stage(acquire, *sys.argv[1:])
