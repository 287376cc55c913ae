"""The ``muster`` command run as a person runs it: in a real pseudo-terminal (rich output), or piped."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MUSTER = str(Path(sys.executable).parent / "muster")
ESC = "\x1b"


def environment(url: str, home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: nothing of the test runner's (no NO_COLOR, no CI) leaks into what rich decides."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "XDG_STATE_HOME": str(home / "state"),
        "MUSTER_URL": url,
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
        **extra,
    }


@dataclass
class Piped:
    code: int
    out: str
    err: str


def piped(env: dict[str, str], *args: str, stdin: str | None = None) -> Piped:
    done = subprocess.run([MUSTER, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60)
    return Piped(done.returncode, done.stdout, done.stderr)


class Terminal:
    """``muster …`` on the slave side of a pty of 160×40; the test reads the master side."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        self.process = subprocess.Popen(
            [MUSTER, *args], stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        self.master = master
        self.raw = b""

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed its side
            chunk = b""
        self.raw += chunk
        return bool(chunk)

    def expect(self, condition: Callable[[str], bool], seconds: float = 15) -> str:
        deadline = time.monotonic() + seconds
        while not condition(self.text):
            if time.monotonic() > deadline:
                raise AssertionError(f"the terminal never showed what was expected; it shows:\n{self.text}")
            if not self._read(0.1) and self.process.poll() is not None:
                raise AssertionError(f"muster exited ({self.process.returncode}) first; it showed:\n{self.text}")
        return self.text

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)

    def wait(self, seconds: float = 30) -> int:
        deadline = time.monotonic() + seconds
        while self._read(0.1) or self.process.poll() is None:
            if time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"muster did not exit; it showed:\n{self.text}")
        os.close(self.master)
        return self.process.wait()


def in_terminal(env: dict[str, str], *args: str) -> tuple[int, str]:
    terminal = Terminal(env, *args)
    code = terminal.wait()
    return code, terminal.text
