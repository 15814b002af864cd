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
    """A stage's directory out, one of its remote objects with 64 bytes zeroed (same size): `make pull` with the
    run cache gave rc 0 and `dvc status` "up to date", the workspace file's md5 differing from the lock's. The
    default remote verifies what it downloads, and `make pull` names the corrupt file."""
    import os
    import shutil

    from tests.conftest import ROOT

    dvc = [sys.executable, "-m", "dvc"]
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*dvc, "init", "-q"], cwd=repo, check=True)
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")  # the project's remote settings
    (repo / ".dvc" / "config").write_text((repo / ".dvc" / "config").read_text().replace("../../zhplm-dvc-remote",
                                                                                         "../../remote"))
    (repo / "dvc.yaml").write_text(
        "stages:\n  make:\n    cmd: python3 -c \"import os; os.makedirs('out', exist_ok=True); "
        "open('out/a.bin', 'wb').write(bytes(range(256)) * 16); open('out/b.bin', 'wb').write(b'x' * 4096)\"\n"
        "    outs: [out]\n")
    subprocess.run([*dvc, "repro", "-q"], cwd=repo, check=True)
    subprocess.run([*dvc, "push", "-q", "--run-cache"], cwd=repo, check=True)
    good = (repo / "out" / "a.bin").read_bytes()
    (obj,) = [p for p in (tmp_path / "remote").rglob("*") if p.is_file() and p.read_bytes() == good]
    obj.chmod(0o644)
    obj.write_bytes(bytes(64) + good[64:])
    shutil.rmtree(repo / ".dvc" / "cache")
    shutil.rmtree(repo / "out")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pulled = subprocess.run([sys.executable, "-m", "tasks.orchestration.remote"], cwd=repo, env=env,
                            capture_output=True, text=True)
    assert pulled.returncode != 0, pulled.stdout + pulled.stderr
    named = [line for line in pulled.stderr.splitlines() if line.startswith("make pull: out/a.bin: ")]
    assert len(named) == 1 and f"object {obj} is corrupt" in named[0], pulled.stderr
    assert not (repo / "out" / "a.bin").exists() or (repo / "out" / "a.bin").read_bytes() == good
