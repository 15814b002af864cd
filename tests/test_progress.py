"""``make repro``'s progress wrapper: Ctrl-C, SIGTERM or a killed wrapper stop ``dvc repro`` and what it
started within seconds, with one line and no traceback (they ran on, orphaned, for up to 2 minutes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import ROOT, gone_within

# a dvc repro that announces a stage, starts it through the run's python shim (no server: a fresh interpreter)
# and waits on it; like DVC, it passes no signal on
FAKE_DVC = textwrap.dedent(f"""\
    #!{sys.executable}
    import os, subprocess, sys
    print("Running stage 'pretrain@mlm-42':", flush=True)
    stage = subprocess.Popen([sys.executable, "-S", {str(ROOT / "tasks/orchestration/forkserver.py")!r}, "client",
                              "-c", "import os, time; open('stage', 'w').write(str(os.getpid())); time.sleep(300)"])
    open("dvc", "w").write(str(os.getpid()))
    stage.wait()
""")
RUN = ("import sys; import tasks.orchestration.progress as p; p.planned = lambda order=None: []; "
       "p.stage_order = lambda: []; sys.exit(p.main([]))")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_progress_stops_dvc_repro_and_its_stage(tmp_path, sig):
    (tmp_path / "bin").mkdir()
    dvc = tmp_path / "bin" / "dvc"
    dvc.write_text(FAKE_DVC)
    dvc.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
           "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", RUN], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not all((tmp_path / f).exists() and (tmp_path / f).read_text() for f in ("dvc", "stage")):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    pids = [int((tmp_path / f).read_text()) for f in ("dvc", "stage")]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert gone_within(pids, 5), "dvc repro or its stage outlived the wrapper"
    if sig == signal.SIGKILL:
        return
    assert proc.returncode == 128 + sig
    assert "[1/1] pretrain@mlm-42" in out
    (line,) = err.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"dvc repro: stopped by {signal.Signals(sig).name} after 0:0"), line


def test_a_second_run_in_the_same_checkout_says_who_holds_it_in_one_line(tmp_path):
    """It died with a 45-line LockError traceback from DVC's status call."""
    import zc.lockfile

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text("stages:\n  a:\n    cmd: echo a\n")
    held = zc.lockfile.LockFile(str(tmp_path / ".dvc" / "tmp" / "lock"))
    try:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
        run = subprocess.run([sys.executable, "-m", "tasks.orchestration.progress"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        held.close()
    (line,) = run.stderr.strip().splitlines()
    assert run.returncode == 1 and line.startswith(f"make repro: another run (PID {os.getpid()}) holds this checkout")
