"""A store whose files turn immutable (``chattr +i``) under a reader (issue #41, item 4): the read
waits until they are writable again instead of the process dying of SIGBUS.

SQLite maps its ``-shm`` and a reader writes its read mark there; once writeback has cleaned the
page, the write faults, and on an immutable file the kernel answers with SIGBUS. Needs root (or
CAP_LINUX_IMMUTABLE) and a file system with the immutable flag (ext4, xfs, btrfs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

# In a process of its own: without the wait, SIGBUS ends it.
SCRIPT = textwrap.dedent(
    """
    import os, sqlite3, subprocess, sys, threading, time
    from pathlib import Path
    from draftgen.store.mapped import waiting_out_bus_errors

    run_dir = Path(sys.argv[1])
    path = run_dir / "draftgen.sqlite"
    writer = sqlite3.connect(path, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (x)")
    writer.commit()
    reader = sqlite3.connect(path, check_same_thread=False)
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (0,)
    with waiting_out_bus_errors(run_dir, patience=60) as wait:
        # A new frame: the reader's next read takes a new read mark, written into the -shm.
        writer.execute("INSERT INTO t VALUES (1)")
        writer.commit()
        subprocess.run(["chattr", "+i", str(path) + "-shm"], check=True)
        os.sync()  # the -shm's pages cleaned: the next write to them faults
        got = []
        count = lambda: got.append(reader.execute("SELECT count(*) FROM t").fetchone())
        read = threading.Thread(target=count)
        read.start()
        read.join(timeout=3)
        waiting = read.is_alive()
        subprocess.run(["chattr", "-i", str(path) + "-shm"], check=True)
        read.join(timeout=30)
    print(waiting, got, wait.waits)
    """
)


def immutable_flag_works(tmp_path) -> bool:
    probe = tmp_path / "probe"
    probe.write_text("")
    if shutil.which("chattr") is None:
        return False
    made = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    return made


def test_a_read_waits_while_the_shm_is_immutable_instead_of_dying(tmp_path):
    if not immutable_flag_works(tmp_path):
        pytest.skip("chattr +i is not permitted here (root and an ext4/xfs/btrfs file system)")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    # The read waited while the file was immutable, then read the committed row.
    assert result.stdout.split("\n")[0] == "True [(1,)] 1", result.stderr
    assert "cannot be written (made immutable?): the run waits until they can" in result.stderr
