"""``make pull``: the committed run's artifacts from the default DVC remote, with errors that name what is wrong.

* The remote, when it is a folder, must exist: without it ``dvc pull`` prints a hundred lines of missing-file
  warnings and never names the folder it looked in.
* The remote verifies what it downloads (``verify = true`` in ``.dvc/config``), so a corrupt object is refused,
  but DVC then says only "Checkout failed for following targets: <out>. Is your cache up to date?". When a
  pull fails, each object of ``dvc.lock`` the folder holds is rehashed and every corrupt one named: the
  workspace file it is, the md5 it has and the one the lock expects.

A remote that is not a folder (S3, SSH, ...) is left to DVC.

    python -m tasks.orchestration.remote
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

import yaml

SHOWN = 5  # corrupt objects named one per line; the rest counted


def remote_folder(root: str = ".") -> tuple[str | None, Path | None]:
    """The default remote's name and, when it is a folder, its path (None for S3, SSH, ...); ``(None, None)``
    without a default remote."""
    from dvc.repo import Repo

    with Repo(root) as repo:
        config = repo.config
        name = config["core"].get("remote")
        if not name:
            return None, None
        url = config["remote"][name]["url"]  # DVC resolves a relative folder against .dvc/
    if urlparse(url).scheme not in ("", "file"):
        return name, None
    return name, Path(urlparse(url).path if url.startswith("file:") else url)


def missing_remote(root: str = ".") -> str | None:
    """The one-line reason ``dvc pull`` cannot find the default remote's folder, or None (it exists, or
    the remote is not a folder)."""
    name, folder = remote_folder(root)
    if name is None:
        return "no default DVC remote (.dvc/config, core.remote): docs/running.md, \"Sharing runs\""
    if folder is None or folder.is_dir():
        return None
    return (f"the DVC remote {name!r} is the folder {folder}, which does not exist: on this machine nothing was "
            "pushed there yet (`make repro` pushes), or point the remote at the folder that holds the runs "
            "(`dvc remote modify local url <folder>`)")


def _md5(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def _objects(lock: dict, folder: Path) -> Iterator[tuple[str, str, Path]]:
    """``(workspace path, md5, object)`` of each file of ``lock``'s outs whose object ``folder`` holds: a
    directory out's files through its ``.dir`` listing (when that is whole JSON; else the listing itself)."""
    def at(md5: str) -> Path:
        return folder / "files" / "md5" / md5[:2] / md5[2:]

    for stage in lock.get("stages", {}).values():
        for out in stage.get("outs", []):
            md5, path = out.get("md5", ""), out["path"]
            if not md5.endswith(".dir"):
                if at(md5).is_file():
                    yield path, md5, at(md5)
                continue
            listing = at(md5)
            if not listing.is_file():
                continue
            try:
                entries = json.loads(listing.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                yield path, md5.removesuffix(".dir"), listing
                continue
            for entry in entries:
                if at(entry["md5"]).is_file():
                    yield f"{path}/{entry['relpath']}", entry["md5"], at(entry["md5"])


def corrupt_objects(root: str = ".") -> list[str]:
    """One line for each object of the folder remote whose content does not hash to its name (DVC names an
    object by its md5): the workspace file, the object's path, its md5 and the expected one."""
    _, folder = remote_folder(root)
    lock_file = Path(root) / "dvc.lock"
    if folder is None or not folder.is_dir() or not lock_file.exists():
        return []
    lock = yaml.safe_load(lock_file.read_text(encoding="utf-8")) or {}
    return [f"{path}: the remote's object {obj} is corrupt (md5 {found}, dvc.lock expects {md5})"
            for path, md5, obj in _objects(lock, folder) if (found := _md5(obj)) != md5]


def main() -> int:
    reason = missing_remote()
    if reason:
        print(f"make pull: {reason}", file=sys.stderr)
        return 1
    pulled = subprocess.run(["dvc", "pull", "--run-cache"])
    if pulled.returncode == 0:
        return 0
    corrupt = corrupt_objects()
    for line in corrupt[:SHOWN]:
        print(f"make pull: {line}", file=sys.stderr)
    if len(corrupt) > SHOWN:
        print(f"make pull: and {len(corrupt) - SHOWN} more corrupt objects", file=sys.stderr)
    if corrupt:
        print("make pull: the files above were refused, not checked out; push them again from a checkout that "
              "has them whole (`dvc push`), or rerun their stages (`make repro`)", file=sys.stderr)
    return pulled.returncode


if __name__ == "__main__":
    sys.exit(main())
