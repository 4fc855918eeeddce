"""Running the `gnnsys` command as a user at a terminal sees it: stdin,
stdout and stderr on a pseudo-terminal (so progress bars draw live), for
the tests of every command that draws one."""

import errno
import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_on_terminal(*args, timeout: float = 120, redraw_always: bool = True, cwd=None) -> tuple[int, str]:
    """(exit status, everything printed) of `python -m gnnsys ARGS` on an 80x24
    pseudo-terminal. `redraw_always`: tqdm redraws its bars at every update
    (TQDM_MININTERVAL=0), so a tiny input exercises what a large one does
    after its first tenth of a second."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("COLUMNS", None)
    if redraw_always:
        env["TQDM_MININTERVAL"] = "0"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gnnsys", *map(str, args)],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=env,
            start_new_session=True,  # the pty becomes its controlling terminal, as a shell's
        )
    finally:
        os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError as e:  # EIO: every holder of the terminal's other side has closed it
                if e.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
            raise AssertionError(f"gnnsys {' '.join(map(str, args))} ran over {timeout} s on a terminal")
        status = proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return status, b"".join(chunks).decode(errors="replace")


def assert_clean(status: int, output: str):
    """Status 0 and no traceback in what the terminal showed."""
    assert "Traceback" not in output, output[-3000:]
    assert status == 0, output[-3000:]
