"""``make pull``'s first step: the default DVC remote, when it is a folder, must exist.

Without it ``dvc pull`` prints a hundred lines of missing-file warnings and never names the folder it looked in.
A remote that is not a folder (S3, SSH, ...) is left to DVC.

    python -m tasks.orchestration.remote
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlparse


def missing_remote(root: str = ".") -> str | None:
    """The one-line reason ``dvc pull`` cannot find the default remote's folder, or None (it exists, or
    the remote is not a folder)."""
    from dvc.repo import Repo

    with Repo(root) as repo:
        config = repo.config
        name = config["core"].get("remote")
        if not name:
            return "no default DVC remote (.dvc/config, core.remote): docs/running.md, \"Sharing runs\""
        url = config["remote"][name]["url"]  # DVC resolves a relative folder against .dvc/
    if urlparse(url).scheme not in ("", "file"):
        return None
    folder = Path(urlparse(url).path if url.startswith("file:") else url)
    if folder.is_dir():
        return None
    return (f"the DVC remote {name!r} is the folder {folder}, which does not exist: on this machine nothing was "
            "pushed there yet (`make repro` pushes), or point the remote at the folder that holds the runs "
            "(`dvc remote modify local url <folder>`)")


def main() -> int:
    reason = missing_remote()
    if reason:
        print(f"make pull: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
