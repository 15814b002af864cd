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
