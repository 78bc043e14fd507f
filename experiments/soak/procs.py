"""The soak's view of its processes: the process tree, each process's role and resources.

Everything is read from ``/proc`` (Linux): a process's parent, command line, resident
memory (``VmRSS``), threads, open file descriptors and children. :func:`become_subreaper`
makes the soak the reaper of its descendants' orphans, so a worker that outlives a killed
learner is re-parented to the soak and found, instead of vanishing into ``init``.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ProcessSample",
    "ProcessTree",
    "become_subreaper",
    "descendants",
    "pid_alive",
    "mapped_shm",
    "shm_entries",
    "shm_names",
]

#: ``prctl`` option that makes the caller the reaper of its descendants' orphans.
PR_SET_CHILD_SUBREAPER = 36
PROC = Path("/proc")


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans; False where it cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (None: the process is gone)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def _parents() -> dict[int, int]:
    """Every live process's parent."""
    parents = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None and fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(root: int) -> list[int]:
    """The live descendants of ``root`` (children first), ``root`` excluded."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _cmdline(pid: int) -> str:
    try:
        return (
            (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _status(pid: int) -> dict[str, str]:
    try:
        lines = (PROC / str(pid) / "status").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in lines if ":" in line)


def _fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(PROC / str(pid) / "fd"))
    except OSError:
        return None


def shm_names() -> set[str]:
    """The names in ``/dev/shm`` (shared-memory segments); empty without it."""
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def mapped_shm() -> set[str]:
    """The ``/dev/shm`` names some live process maps (read from every ``/proc/PID/maps``)."""
    names = set()
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "maps").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            at = line.find("/dev/shm/")
            if at >= 0:
                names.add(line[at + 9 :].split(" ")[0])
    return names


def shm_entries() -> tuple[int, int]:
    """Files in ``/dev/shm`` and their bytes (shared-memory segments), ``(0, 0)`` without it."""
    count = size = 0
    try:
        with os.scandir("/dev/shm") as entries:
            for entry in entries:
                try:
                    size += entry.stat(follow_symlinks=False).st_size
                    count += 1
                except OSError:
                    continue
    except OSError:
        pass
    return count, size


@dataclass
class ProcessSample:
    """One process's resources at one moment.

    Args:
        t_s: Seconds since the soak started.
        pid: The process id.
        role: What the process is (``learner``, ``actor-worker``, ``forkserver``,
            ``resource-tracker``, ``mode3-server``, ``soak``, ``other``).
        rss_mib: Resident memory (MiB).
        fds: Open file descriptors.
        threads: Threads.
        children: Live child processes.
        age_s: Seconds since the soak first saw the process.
    """

    t_s: float
    pid: int
    role: str
    rss_mib: float
    fds: int
    threads: int
    children: int
    age_s: float


class ProcessTree:
    """The soak's processes by role, sampled on demand.

    Args:
        root: The soak's own pid (its descendants are the tree).
        started: The soak's start (``time.monotonic()``).
    """

    def __init__(self, root: int, started: float) -> None:
        self.root = root
        self.started = started
        #: Named pids: ``{"learner": pid, "mode3-server": pid}`` as the soak starts them.
        self.named: dict[int, str] = {}
        self._first_seen: dict[int, float] = {}

    def name(self, pid: int, role: str) -> None:
        """Give a process the soak started its role."""
        self.named[pid] = role

    def role(self, pid: int, parents: dict[int, int] | None = None) -> str:
        """What ``pid`` is, from the names given and its command line."""
        if pid == self.root:
            return "soak"
        if pid in self.named:
            return self.named[pid]
        command = _cmdline(pid)
        if "resource_tracker" in command:
            return "resource-tracker"
        if "forkserver" in command:
            parent = (parents or _parents()).get(pid)
            return "forkserver" if self.named.get(parent or -1) == "learner" else "actor-worker"
        program = command.split(" ", 1)[0].rsplit("/", 1)[-1]
        return f"other ({program or '?'})"

    def members(self) -> list[int]:
        """The soak and its live descendants."""
        return [self.root, *descendants(self.root)]

    def by_role(self, role: str) -> list[int]:
        """The live descendants of that role."""
        parents = _parents()
        return [pid for pid in descendants(self.root) if self.role(pid, parents) == role]

    def sample(self, pids: Iterable[int] | None = None) -> list[ProcessSample]:
        """One :class:`ProcessSample` per live process of the tree."""
        now = time.monotonic()
        parents = _parents()
        counts: dict[int, int] = {}
        for parent in parents.values():
            counts[parent] = counts.get(parent, 0) + 1
        samples = []
        for pid in self.members() if pids is None else pids:
            status, fds = _status(pid), _fd_count(pid)
            if not status or fds is None:
                continue  # gone while sampled
            first = self._first_seen.setdefault(pid, now)
            rss_kb = int(status.get("VmRSS", "0 kB").split()[0])
            samples.append(
                ProcessSample(
                    t_s=round(now - self.started, 3),
                    pid=pid,
                    role=self.role(pid, parents),
                    rss_mib=round(rss_kb / 1024, 3),
                    fds=fds,
                    threads=int(status.get("Threads", "0").strip()),
                    children=counts.get(pid, 0),
                    age_s=round(now - first, 3),
                )
            )
        return samples
