"""How tests/doc_transcripts.py runs the commands of one transcript: a
session, as a shell would run them one after the other, with background
jobs, exported variables and the signals that stop the jobs.

A session reads a command in one of four forms (anything else runs with
``bash -c`` and waits for its end):

- ``export NAME=VALUE ...``: the later commands of the session see these
  variables (each word is ``NAME=VALUE``, split as the shell splits words,
  nothing expanded); it prints nothing;
- ``COMMAND &``: runs ``COMMAND`` in the background, as job ``%1``, ``%2``,
  ... in order, and prints what it prints up to its first line that says
  ``ready`` (the line an engine, a worker or a console prints on stderr
  once it is open): the session reads the job's output until that line
  comes, so the next command runs against a process that is ready (or it
  prints all a job printed before it exited);
- ``kill [-SIGNAL] %N ...`` (``; wait`` after it is allowed and changes
  nothing): sends the signal (TERM by default) to those jobs, waits for
  each to exit, and prints what each printed after its ready line, job
  after job in the order named (where a terminal interleaves their lines
  as they come, in an order that varies from run to run). What a job
  logged meanwhile is there too (an engine's record of a run that failed,
  with the run's traceback), so a job stopped by TERM or INT must exit with
  status 0, where other commands must print no traceback.

`Session.close` stops the jobs still running when the transcript ends,
after it printed or when it failed: SIGTERM, then SIGKILL if one has not
exited within `STOP_WITHIN` seconds. A job runs in a process group of its
own, which the signals reach whole.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Final

ROOT: Final = Path(__file__).resolve().parents[1]

WITHIN: Final = 120.0
"""Seconds one command may take, and a background job to say it is ready."""
STOP_WITHIN: Final = 45.0
"""Seconds a job may take to exit after a signal (above the 30 s an engine
or a worker may drain) before it is killed."""

READY: Final = re.compile(r"\bready\b")
BACKGROUND: Final = re.compile(r"(?P<command>.+?)\s+&")
KILL: Final = re.compile(r"kill(?:\s+-(?P<signal>\w+))?(?P<jobs>(?:\s+%\d+)+)\s*(?:;\s*wait)?")
ASSIGNMENT: Final = re.compile(r"(?P<name>[A-Za-z_]\w*)=(?P<value>.*)", re.S)


def environment(folder: Path) -> dict[str, str]:
    """What the commands run in ``folder`` with (see tests/doc_transcripts.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_DURABLE_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # The folder's link to the source tree's examples/: a traceback names
    # their files under the folder, which the output shows relative to it.
    env["PYTHONPATH"] = str(folder / "examples")
    env["REPO"] = str(ROOT)
    env["COLUMNS"] = "100"
    env["NO_COLOR"] = "1"
    # What would make rich draw for a terminal when the output is a pipe.
    for forcing in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE"):
        env.pop(forcing, None)
    return env


def checked(command: str, out: str) -> str:
    """``out``, unless it shows a crash of trio-durable (a transcript shows
    what a command says, never a traceback).

    Raises:
      AssertionError: ``out`` holds a traceback.
    """
    if "Traceback (most recent call last)" in out:
        raise AssertionError(f"$ {command}\n{out}")
    return out


def run(
    command: str, folder: Path, *, check: bool = False, env: Mapping[str, str] | None = None
) -> str:
    """What ``command`` prints in ``folder``, stdout and stderr as they come
    (with ``check``, a setup: it must exit 0)."""
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=folder,
        env=dict(environment(folder) if env is None else env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        timeout=WITHIN,
        check=False,
    )
    out = done.stdout.decode()
    if check and done.returncode != 0:
        raise AssertionError(f"setup {command!r} exited {done.returncode}:\n{out}")
    return checked(command, out)


class Job:
    """A command running in the background, and the lines it printed.

    A thread reads its output (stdout and stderr) into a queue as it comes:
    the session waits on the queue for the ready line, and the pipe never
    fills while the job runs unread.
    """

    def __init__(self, command: str, folder: Path, env: Mapping[str, str]) -> None:
        self.command = command
        self.process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=folder,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        assert self.process.stdout is not None
        self.reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self.reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        with stream:
            for line in stream:
                self._lines.put(line.decode())
        self._lines.put(None)  # the end of the output

    def until_ready(self) -> str:
        """What the job prints up to its ready line (all it printed, if it
        exited first).

        Raises:
          AssertionError: Neither came within `WITHIN` seconds.
        """
        out: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=WITHIN)
            except queue.Empty:
                raise AssertionError(
                    f"{self.command!r} did not say it is ready within {WITHIN} s:\n{''.join(out)}"
                ) from None
            if line is None:
                self._lines.put(None)  # `rest` reads the end too
                return "".join(out)
            out.append(line)
            if READY.search(line):
                return "".join(out)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the job's process group (if it still runs)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                os.killpg(self.process.pid, signum)

    def rest(self) -> str:
        """What the job printed after its ready line, once it exited.

        Raises:
          AssertionError: It did not exit within `STOP_WITHIN` seconds (it is
            killed then).
        """
        try:
            self.process.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.process.wait()
            raise AssertionError(f"{self.command!r} did not exit within {STOP_WITHIN} s") from None
        self.reader.join()
        out = []
        while (line := self._lines.get_nowait()) is not None:
            out.append(line)
        return "".join(out)


class Session:
    """The commands of one transcript, run one after the other in
    ``folder`` (see the module's docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = environment(folder)
        self.jobs: list[Job] = []

    def run(self, command: str) -> str:
        """What ``command`` prints (see the module's docstring).

        Raises:
          AssertionError: It printed a traceback, a job it names does not
            exist, or a job did not get ready or stop in time.
        """
        if command.startswith("export "):
            for word in shlex.split(command)[1:]:
                assignment = ASSIGNMENT.fullmatch(word)
                assert assignment, f"{command!r}: {word!r} is not NAME=VALUE"
                self.env[assignment["name"]] = assignment["value"]
            return ""
        if background := BACKGROUND.fullmatch(command):
            self.jobs.append(Job(background["command"], self.folder, self.env))
            return checked(command, self.jobs[-1].until_ready())
        if kill := KILL.fullmatch(command):
            signum = signal.Signals["SIG" + (kill["signal"] or "TERM").removeprefix("SIG")]
            named = [int(n) for n in re.findall(r"%(\d+)", kill["jobs"])]
            assert all(1 <= n <= len(self.jobs) for n in named), f"{command!r}: no such job"
            for n in named:
                self.jobs[n - 1].signal(signum)
            out = []
            for n in named:
                out.append(self.jobs[n - 1].rest())
                # An engine or a worker stopped so drains and exits 0: any
                # other status is a crash, whatever it printed.
                status = self.jobs[n - 1].process.returncode
                if signum in (signal.SIGTERM, signal.SIGINT) and status != 0:
                    raise AssertionError(f"$ {command}\n%{n} exited {status}:\n{out[-1]}")
            return "".join(out)
        return run(command, self.folder, env=self.env)

    def close(self) -> None:
        """Stop the jobs still running: SIGTERM, then SIGKILL after
        `STOP_WITHIN` seconds."""
        for job in self.jobs:
            job.signal(signal.SIGTERM)
        for job in self.jobs:
            try:
                job.process.wait(timeout=STOP_WITHIN)
            except subprocess.TimeoutExpired:
                job.signal(signal.SIGKILL)
                job.process.wait()
            # The reader ends at the end of the output, which the group's
            # exit closes.
            job.reader.join(timeout=STOP_WITHIN)
