"""`make pull` without the remote folder printed 105 lines of DVC warnings and never named the folder."""

import subprocess
import sys

from tasks.orchestration.remote import missing_remote


def test_a_missing_remote_folder_is_one_line_naming_it_and_an_existing_one_passes(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=repo, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "remote", "add", "-d", "local", "../remote"], cwd=repo, check=True)
    reason = missing_remote(str(repo))
    assert reason.startswith(f"the DVC remote 'local' is the folder {tmp_path / 'remote'}, which does not exist")
    (tmp_path / "remote").mkdir()
    assert missing_remote(str(repo)) is None


def test_a_corrupt_object_pulled_is_refused_naming_the_file(tmp_path):
    """One remote object with 64 bytes zeroed (same size): `make pull` gave rc 0 and `dvc status` "up to date", the
    workspace file's md5 differing from the lock's. The default remote verifies what it downloads."""
    import shutil
    from pathlib import Path

    from tests.conftest import ROOT

    dvc = [sys.executable, "-m", "dvc"]
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*dvc, "init", "-q"], cwd=repo, check=True)
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")  # the project's remote settings
    (repo / ".dvc" / "config").write_text((repo / ".dvc" / "config").read_text().replace("../../zhplm-dvc-remote",
                                                                                         "../../remote"))
    (repo / "data.bin").write_bytes(bytes(range(256)) * 16)
    subprocess.run([*dvc, "add", "-q", "data.bin"], cwd=repo, check=True)
    subprocess.run([*dvc, "push", "-q"], cwd=repo, check=True)
    (obj,) = [p for p in (tmp_path / "remote").rglob("*") if p.is_file()]
    obj.chmod(0o644)
    obj.write_bytes(bytes(64) + obj.read_bytes()[64:])
    shutil.rmtree(repo / ".dvc" / "cache")
    (repo / "data.bin").unlink()
    pulled = subprocess.run([*dvc, "pull"], cwd=repo, capture_output=True, text=True)
    assert pulled.returncode != 0, pulled.stdout + pulled.stderr
    assert "data.bin" in pulled.stdout + pulled.stderr
    assert not Path(repo / "data.bin").exists() or (repo / "data.bin").read_bytes()[:64] != bytes(64)
