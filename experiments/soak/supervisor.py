"""The soak's moving parts: the learner it restarts, the log it watches, the faults it runs.

* :class:`Learner` runs ``fleetgym train --mode async --backend process --inference
  server`` as a child process (its own session), and relaunches it with ``--resume``;
* :class:`LogWatcher` follows the learner's per-update log (``--log``, written as the run
  goes) and counts the updates the current learner adds;
* :class:`FaultRunner` injects the faults on a schedule, in a thread of its own, and
  records what each did and whether training survived it.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgym.experiments.soak import faults
from fleetgym.experiments.soak.procs import ProcessTree, descendants, pid_alive

__all__ = ["Fault", "FaultRunner", "Learner", "LogWatcher", "Restart", "FAULT_KINDS"]

#: The faults injected in turn every ``--fault-every`` seconds (the learner's kill has a
#: schedule of its own, ``--learner-kill-every``).
FAULT_KINDS = ("actor-kill", "actor-stop", "server-connections", "mode3-garbage")
#: Seconds the processes of a killed learner get to exit on their own.
ORPHAN_GRACE_S = 15.0


@dataclass
class Fault:
    """One injected fault and what came of it.

    Args:
        t_s: Seconds into the soak when it was injected.
        kind: One of :data:`FAULT_KINDS` or ``learner-kill``.
        target: The pid or port it hit.
        survived: Training went on (and the fault's own check passed); ``None``: it could
            not be injected here (``detail`` says why).
        recovery_s: Seconds from the fault to the next update of the learner (a killed
            learner: to the resumed learner's first new update).
        detail: What happened.
    """

    t_s: float
    kind: str
    target: int
    survived: bool | None
    recovery_s: float | None
    detail: str


@dataclass
class Restart:
    """One kill and resume of the learner.

    Args:
        t_s: Seconds into the soak when the learner was killed.
        checkpoint_updates: Updates in the checkpoint it resumed from.
        last_update: The last update the killed learner logged.
        redone_updates: Updates done after that checkpoint and done again after the resume.
        resume_s: Seconds from the relaunch to the resumed learner's first new update.
        left_behind: The killed learner's processes still alive after
            :data:`ORPHAN_GRACE_S` (then killed).
    """

    t_s: float
    checkpoint_updates: int
    last_update: int
    redone_updates: int
    resume_s: float | None
    left_behind: int


class LogWatcher:
    """Follows the learner's ``log.csv``: the updates the current learner added.

    The learner appends a row per update and rewrites the file (a new inode) at a resumed
    run's first update; rows below :attr:`floor` (the checkpoint's updates) are history.

    Args:
        path: The log.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        #: Updates the learners added (each counted once, across restarts).
        self.events = 0
        #: The last update logged, its env steps and the failed rollouts so far.
        self.last_update, self.total_steps, self.actor_failures = -1, 0, 0
        self.floor = 0
        self._inode: int | None = None
        self._offset = 0
        self._buffer = b""

    def resumed(self, checkpoint_updates: int) -> None:
        """A resumed learner starts: rows below ``checkpoint_updates`` are history."""
        with self.lock:
            self.floor = checkpoint_updates

    def poll(self) -> None:
        """Read what the learner added since the last poll."""
        try:
            stat = self.path.stat()
            if stat.st_ino != self._inode:
                self._inode, self._offset, self._buffer = stat.st_ino, 0, b""
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return
        self._offset += len(data)
        records = (self._buffer + data).split(b"\r\n")
        self._buffer = records.pop()
        with self.lock:
            for record in records:
                fields = record.split(b",", 6)
                if not fields[0].isdigit():
                    continue  # the header
                update = int(fields[0])
                if update >= self.floor:
                    self.floor = update + 1
                    self.events += 1
                    self.last_update = update
                    self.total_steps = int(fields[1])
                    self.actor_failures = int(fields[5])

    def snapshot(self) -> tuple[int, int]:
        """``(events, actor_failures)`` now."""
        with self.lock:
            return self.events, self.actor_failures


class Learner:
    """The learner process: ``fleetgym train --mode async`` with process actors, an
    inference server, a live log and checkpoints, relaunched with ``--resume``.

    Args:
        command: The ``fleetgym train`` arguments (without ``--resume``).
        run_dir: Its ``--out`` (``checkpoints/`` and ``log.csv`` are there).
        logs: Where each incarnation's output goes (``learner-K.log``).
        tree: The soak's process tree (the learner is named in it).
    """

    def __init__(self, command: list[str], run_dir: Path, logs: Path, tree: ProcessTree) -> None:
        self.command, self.run_dir, self.logs, self.tree = command, run_dir, logs, tree
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0
        self.launched = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, resume: bool = False) -> None:
        """Launch the next incarnation (``--resume`` the run's checkpoints)."""
        args = [sys.executable, "-m", "fleetgym", *self.command]
        if resume:
            args += ["--resume", str(self.run_dir / "checkpoints")]
        self.incarnation += 1
        out = (self.logs / f"learner-{self.incarnation}.log").open("wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        out.close()
        self.launched = time.monotonic()
        self.tree.name(self.proc.pid, "learner")

    def checkpoint_updates(self) -> int | None:
        """Updates in the newest checkpoint (its file name), None without one."""
        names = [p.name for p in (self.run_dir / "checkpoints").glob("ckpt-*.pt")]
        counts = [int(m.group(1)) for n in names if (m := re.fullmatch(r"ckpt-(\d+)\.pt", n))]
        return max(counts) if counts else None

    def workers(self) -> list[int]:
        """The learner's actor worker processes now."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        mine = set(descendants(self.pid))
        return [pid for pid in self.tree.by_role("actor-worker") if pid in mine]

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """Interrupt the learner (Ctrl-C: it stops its actors) and wait; SIGKILL after
        ``timeout_s``. Returns its exit status (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


class FaultRunner(threading.Thread):
    """Injects the faults on their schedule and records each (a thread of the soak).

    Args:
        learner: The learner process.
        watcher: Its log.
        mode3_port: The Mode 3 server's port.
        mode3_alive: Whether the Mode 3 server process lives.
        settings: ``fault_every``, ``learner_kill_every``, ``actor_timeout``,
            ``recover_s``, ``kinds`` and ``seed`` (a namespace).
        started: The soak's start (``time.monotonic()``).
        on_restart: Called with each :class:`Restart`.
    """

    def __init__(
        self,
        learner: Learner,
        watcher: LogWatcher,
        mode3_port: int,
        mode3_alive: Callable[[], bool],
        settings: Any,
        started: float,
        on_restart: Callable[[Restart], None],
    ) -> None:
        super().__init__(name="soak-faults", daemon=True)
        self.learner, self.watcher, self.mode3_port = learner, watcher, mode3_port
        self.mode3_process_alive = mode3_alive
        self.settings, self.started, self.on_restart = settings, started, on_restart
        self.rng = random.Random(settings.seed)
        self.faults: list[Fault] = []
        #: Set at the soak's end: no new fault starts (the one under way is judged).
        self.closing = threading.Event()
        #: Set to abandon a fault's wait (an interrupted soak).
        self.halt = threading.Event()
        #: Held while the learner is being killed and relaunched.
        self.restarting = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.started

    def run(self) -> None:
        s = self.settings
        next_fault, next_kill = s.fault_every, s.learner_kill_every
        turn = 0
        while not self.closing.is_set() and not self.halt.is_set():
            if next_kill is not None and self.now() >= next_kill:
                if self._learner_kill():
                    next_kill += s.learner_kill_every
                continue
            if self.now() >= next_fault and s.kinds:
                self._inject(s.kinds[turn % len(s.kinds)])
                turn += 1
                next_fault += s.fault_every
                next_fault = max(next_fault, self.now())  # a long fault delays the next
                continue
            self.closing.wait(0.2)

    def _record(self, kind: str, target: int, survived: bool | None, recovery: float | None,
                detail: str, at: float) -> None:  # fmt: skip
        rounded = None if recovery is None else round(recovery, 2)
        self.faults.append(Fault(round(at, 2), kind, target, survived, rounded, detail))

    def _await_progress(
        self, events: int, need: int, timeout_s: float, since: float
    ) -> float | None:
        """Seconds from ``since`` until the watcher counts ``need`` updates beyond
        ``events`` (None: not within ``timeout_s``, or the soak is ending)."""
        began = time.monotonic()
        while time.monotonic() - began < timeout_s and not self.halt.is_set():
            if self.watcher.snapshot()[0] >= events + need:
                return time.monotonic() - since
            time.sleep(0.1)
        return None

    def _await(self, condition: Callable[[], bool], since: float) -> float | None:
        """Seconds from ``since`` until ``condition()`` holds (None: not within
        ``recover_s``, or the soak is ending)."""
        while time.monotonic() - since < self.settings.recover_s and not self.halt.is_set():
            if condition():
                return time.monotonic() - since
            time.sleep(0.1)
        return None

    def _inject(self, kind: str) -> None:
        at = self.now()
        if kind == "mode3-garbage":
            sent = faults.send_garbage(self.mode3_port, self.rng)
            problem = faults.mode3_alive(self.mode3_port)
            alive = self.mode3_process_alive()
            detail = f"{sent} malformed inputs; a client session afterwards: " + (
                "worked" if not problem else problem
            )
            self._record(kind, self.mode3_port, alive and not problem, None, detail, at)
            return
        workers = self.learner.workers()
        if not workers:
            self._record(kind, 0, None, None, "no actor worker running at that moment", at)
            return
        failures = self.watcher.snapshot()[1]
        began = time.monotonic()
        if kind == "actor-kill":
            pid = self.rng.choice(workers)
            faults.kill(pid)
            detail, target, ok = f"SIGKILL worker {pid}", pid, True
        elif kind == "actor-stop":
            pid = self.rng.choice(workers)
            hold = self.settings.actor_timeout + 15.0
            gone = faults.stop_for(pid, hold)
            ok = gone is not None
            detail = (
                f"SIGSTOP worker {pid}: killed by the trainer after {gone:.1f} s "
                f"(actor_timeout {self.settings.actor_timeout:g} s)"
                if ok
                else f"SIGSTOP worker {pid}: still alive after {hold:g} s, continued"
            )
            target = pid
        else:  # server-connections
            ports = faults.listening_ports(self.learner.pid)
            if not ports:
                self._record(kind, 0, None, None, "the learner listens on no port", at)
                return
            closed, error = faults.close_connections(ports[0])
            if error:
                self._record(kind, ports[0], None, None, f"ss -K failed: {error}", at)
                return
            detail, target, ok = f"reset {closed} sockets of port {ports[0]}", ports[0], True
        # Survived: the trainer noticed (a failed rollout counted, its actor replaced) and
        # two more updates followed.
        noticed = self._await(lambda: self.watcher.snapshot()[1] > failures, began)
        recovery = None
        if noticed is not None:
            seen = self.watcher.snapshot()[0]
            recovery = self._await(lambda: self.watcher.snapshot()[0] >= seen + 2, began)
        after = self.watcher.snapshot()[1]
        detail += f"; failed rollouts {failures} -> {after}"
        if noticed is None:
            detail += f"; no failed rollout counted within {self.settings.recover_s:g} s"
        alive = self.learner.proc is not None and self.learner.proc.poll() is None
        survived = ok and recovery is not None and alive
        self._record(kind, target, survived, recovery, detail, at)

    def _learner_kill(self) -> bool:
        """Kill the learner and resume it; False if it has no checkpoint yet."""
        checkpoint = self.learner.checkpoint_updates()
        if checkpoint is None or self.learner.proc is None:
            return False
        at = self.now()
        with self.restarting:
            pid = self.learner.pid
            family = descendants(pid)
            last = self.watcher.last_update
            faults.kill(pid)
            self.learner.proc.wait()
            began = time.monotonic()
            left = []
            while time.monotonic() - began < ORPHAN_GRACE_S:
                left = [p for p in family if pid_alive(p)]
                if not left:
                    break
                time.sleep(0.2)
            for orphan in left:
                faults.kill(orphan)
            checkpoint = self.learner.checkpoint_updates() or 0
            self.watcher.resumed(checkpoint)
            events = self.watcher.snapshot()[0]
            self.learner.start(resume=True)
        resume = self._await_progress(
            events, 1, self.settings.recover_s + 120, self.learner.launched
        )
        restart = Restart(round(at, 2), checkpoint, last, max(0, last + 1 - checkpoint),
                          None if resume is None else round(resume, 2), len(left))  # fmt: skip
        self.on_restart(restart)
        detail = (
            f"SIGKILL learner {pid}; resumed from the checkpoint after {checkpoint} updates "
            f"({restart.redone_updates} updates done again); {len(left)} of its "
            f"{len(family)} processes left behind"
        )
        self._record("learner-kill", pid, resume is not None and not left, resume, detail, at)
        return True


def as_rows(records: list[Any]) -> list[dict[str, Any]]:
    """Dataclass records as dicts (for CSV and JSON)."""
    return [dataclasses.asdict(r) for r in records]
