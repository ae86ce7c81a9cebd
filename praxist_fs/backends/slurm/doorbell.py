"""The doorbell Slurm-mode shims ring (issue 28, item 6): a UDP socket of the coordinator
to which a shim sends one datagram, ``<job id>/<attempt id>``, once it wrote READY and
once it wrote exit.json, so that a command's start and end are seen at once rather
than at the next squeue poll (a shared filesystem's writes from another node are
seen by no inotify here).

A datagram is a hint, never a fact: the backend reads the attempt's files itself, for
attempts it tracks only; a lost, forged or unroutable one costs nothing but a look,
and the polls find everything anyway. The address given to the shims is numeric (a
shim must not wait on a resolver after its command ended): the coordinator's host name
(or ``slurm.notify_host``) resolved once, here.
"""

from __future__ import annotations

import logging
import socket

log = logging.getLogger("praxist_fs")

MAX_DATAGRAMS = 1024  # read per call: a flood is drained over turns of the loop
MAX_BYTES = 512


class Doorbell:
    def __init__(self, host: str | None = None) -> None:
        name = host or socket.gethostname()
        family, _, _, _, address = socket.getaddrinfo(name, 0, type=socket.SOCK_DGRAM)[0]
        self.socket = socket.socket(family, socket.SOCK_DGRAM)
        self.socket.setblocking(False)
        self.socket.bind(("::" if family == socket.AF_INET6 else "", 0))
        self.address = [address[0], self.socket.getsockname()[1]]  # for the shims' spec

    def fileno(self) -> int:
        return self.socket.fileno()

    def rung(self) -> set[tuple[str, str]]:
        """The (job id, attempt id) of each datagram waiting, once each."""
        keys: set[tuple[str, str]] = set()
        for _ in range(MAX_DATAGRAMS):
            try:
                data = self.socket.recv(MAX_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # an ICMP error of an earlier send: nothing to read
                log.debug("doorbell: %s", exc)
                continue
            job_id, slash, attempt_id = data.decode("ascii", "replace").partition("/")
            if slash and job_id and attempt_id:
                keys.add((job_id, attempt_id))
        return keys

    def close(self) -> None:
        self.socket.close()


def open_doorbell(host: str | None) -> Doorbell | None:
    """The doorbell, or None where none can be had (no address for the host name: the
    polls alone then say when commands start and end)."""
    try:
        return Doorbell(host)
    except OSError as exc:
        log.warning("Slurm shims cannot ring the coordinator (%s): their starts and ends "
                    "are seen at the next squeue poll", exc)
        return None
