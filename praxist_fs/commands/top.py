"""``praxist-fs top``: a live full-screen view of one run (R-OPS-1, R-OPS-4).

It draws status.json (render.py lays it out) with curses, the standard library's
binding of ncurses: a well-kept terminal library that costs no dependency, restores
the terminal however the view ends (``curses.wrapper``) and reads keys portably.

A watchdog observer on ``resource_scheduler/`` (inotify, as the coordinator's) rings
a pipe when status.json is replaced; redraws are debounced to at most four a second.
A one-second tick refreshes the ages and notices a coordinator that died, which no
file event announces. Keys act through the same code as ``logs`` and ``cancel``.
"""

from __future__ import annotations

import argparse
import curses
import io
import locale
import os
import select
import sys
import textwrap
import time
from pathlib import Path

from .. import client
from ..adapters import wakepipe
from ..adapters.layout import RunLayout
from ..adapters.lock import live_endpoint
from . import add_run_dir, run_layout
from .logs import write_logs
from .render import TOP_JOB_HEADER, format_control_reply, top_jobs, top_summary

REDRAW_MIN_INTERVAL = 0.25  # at most four redraws a second, however fast status.json changes
TICK_SECONDS = 1.0
CANCEL_TIMEOUT = 10.0       # seconds to wait for the coordinator's answer to a cancel
DETAIL_LINES = 2            # the selected job's full line, wrapped, above the footer
LOG_LINES = 5000            # the log view keeps the last lines of the job's output
ESCAPE = 27
ENTER = (10, 13, curses.KEY_ENTER)
BACKSPACE = (8, 127, curses.KEY_BACKSPACE)
KEYS_HELP = "q quit  up/down/PgUp/PgDn select  / filter  l log  c cancel"


def add_parsers(sub: argparse._SubParsersAction) -> None:
    top = sub.add_parser(
        "top", help="a live full-screen view of the run: queued jobs and why they wait, "
        "running jobs, GPUs, pressure, the open generation (q quits)",
        description="Redraws when status.json changes. Keys: q quits, arrows and "
        "PgUp/PgDn select a job, / filters the jobs (Enter keeps the filter, Esc clears "
        "it), l shows the selected job's log, c cancels it after a y/n confirmation.")
    add_run_dir(top)
    top.set_defaults(func=cmd_top)


def cmd_top(args: argparse.Namespace) -> int:
    if (layout := run_layout(args, "praxist-fs top")) is None:
        return 2
    if not layout.root.is_dir():
        print(f"praxist-fs top: no run directory {layout.root}", file=sys.stderr)
        return 2
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("praxist-fs top: needs a terminal; scripts read praxist-fs status --json",
              file=sys.stderr)
        return 2
    locale.setlocale(locale.LC_ALL, "")  # ncurses draws UTF-8 only under a UTF-8 locale
    bell = Doorbell(layout.scheduler)
    try:
        curses.wrapper(lambda screen: Top(screen, layout, bell).loop())
    except KeyboardInterrupt:  # Ctrl-C quits like q; the wrapper restored the terminal
        pass
    finally:
        bell.close()
    return 0


class Doorbell:
    """A pipe a watchdog observer writes a byte into on any change in ``directory``,
    once armed (``Top.loop`` arms it after the first frame: watchdog's import is tens
    of milliseconds of ``top``'s start, R-PERF-3)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.observer = None

    def arm(self) -> None:
        """Watch once the directory exists: a run whose coordinator never started has
        none yet. Without inotify (its limits reached) the tick alone redraws."""
        if self.observer is None and self.directory.is_dir():
            from ..adapters.watcher import needs_polling, start_observer

            try:
                self.observer = start_observer([self.directory], self.ring,
                                               polling=needs_polling(self.directory))
            except OSError:
                pass

    def ring(self) -> None:
        os.write(self.write_fd, b".")  # a full pipe already rings: the guard drops the error

    def drain(self) -> None:
        wakepipe.drain(self.read_fd)

    def close(self) -> None:
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(timeout=5.0)
        os.close(self.read_fd)
        os.close(self.write_fd)


class Top:
    """The view's state (what status.json says, the filter, the selected job, a prompt,
    the log shown) and its keys; ``draw`` puts it on the screen."""

    def __init__(self, screen: curses.window, layout: RunLayout, bell: Doorbell) -> None:
        self.screen, self.layout, self.bell = screen, layout, bell
        self.alive = False
        self.lines: list[str] = []       # the summary above the job list
        self.jobs: list[dict] = []       # every job status.json lists
        self.rows: list[dict] = []       # the jobs the filter keeps
        self.selected: str | None = None  # a job id: the selection follows its job
        self.first = 0                   # the first row shown of the job list
        self.filter = ""
        self.prompt: str | None = None   # "filter" while typing one, "cancel" while asking
        self.message = ""
        self.log: tuple[str, list[str]] | None = None  # (job id, its last lines) when shown
        self.log_first = 0

    # -- the loop -------------------------------------------------------------

    def loop(self) -> None:
        for setup in (lambda: curses.curs_set(0), lambda: curses.set_escdelay(25)):
            try:
                setup()
            except (curses.error, AttributeError):  # a terminal without; Python < 3.9
                pass
        self.screen.nodelay(True)
        self.screen.keypad(True)
        self.reload()
        self.draw()
        self.bell.arm()  # stale: what changed before it armed is read at the next redraw
        drawn_at, next_tick, stale = time.monotonic(), time.monotonic() + TICK_SECONDS, True
        while True:
            now = time.monotonic()
            wait = max(0.0, drawn_at + REDRAW_MIN_INTERVAL - now) if stale else next_tick - now
            ready, _, _ = select.select([sys.stdin, self.bell.read_fd], [], [], max(0.0, wait))
            if self.bell.read_fd in ready:
                self.bell.drain()
                stale = True
            pressed = False
            while (key := self.screen.getch()) != -1:
                if self.on_key(key) == "quit":
                    return
                pressed = True
            now = time.monotonic()
            if now >= next_tick:
                self.bell.arm()
                stale, next_tick = True, now + TICK_SECONDS
            redraw = pressed
            if stale and now - drawn_at >= REDRAW_MIN_INTERVAL:
                self.reload()
                stale, redraw = False, True
            if redraw:
                self.draw()
                drawn_at = now

    def reload(self) -> None:
        doc = client.status_document(self.layout)
        self.alive = live_endpoint(self.layout) is not None
        try:
            self.lines = top_summary(doc, self.alive, str(self.layout.root), time.time())
            self.jobs = top_jobs(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # not a view to crash
            self.lines = [f"cannot show status.json ({type(exc).__name__}: {exc}); "
                          "praxist-fs status --json prints it"]
            self.jobs = []
        self.apply_filter()

    def apply_filter(self) -> None:
        needle = self.filter.lower()
        self.rows = [row for row in self.jobs if needle in row["text"].lower()]
        ids = [row["job_id"] for row in self.rows]
        if self.selected not in ids:
            self.selected = ids[0] if ids else None

    # -- keys -----------------------------------------------------------------

    def on_key(self, key: int) -> str | None:
        if key == curses.KEY_RESIZE:
            return None
        if self.prompt == "filter":
            self.filter_key(key)
        elif self.prompt == "cancel":
            self.prompt = None
            if key in (ord("y"), ord("Y")) and self.selected:
                self.cancel(self.selected)
            else:
                self.message = "not cancelled"
        elif self.log is not None:
            self.log_key(key)
        else:
            return self.view_key(key)
        return None

    def view_key(self, key: int) -> str | None:
        self.message = ""  # the last answer stays until the next key
        if key in (ord("q"), ord("Q")):
            return "quit"
        if key == ord("/"):
            self.prompt = "filter"
        elif key == ord("l") and self.selected:
            self.open_log(self.selected)
        elif key == ord("c") and self.selected:
            self.prompt = "cancel"
        else:
            self.move(key, self.list_height())
        return None

    def filter_key(self, key: int) -> None:
        if key in ENTER:
            self.prompt = None
        elif key == ESCAPE:
            self.prompt, self.filter = None, ""
        elif key in BACKSPACE:
            self.filter = self.filter[:-1]
        elif 32 <= key < 127:
            self.filter += chr(key)
        self.apply_filter()

    def move(self, key: int, page: int) -> None:
        steps = {curses.KEY_UP: -1, curses.KEY_DOWN: 1, curses.KEY_PPAGE: -page,
                 curses.KEY_NPAGE: page, curses.KEY_HOME: -len(self.rows),
                 curses.KEY_END: len(self.rows)}
        if key not in steps or not self.rows:
            return
        ids = [row["job_id"] for row in self.rows]
        at = min(max(0, ids.index(self.selected) + steps[key]), len(ids) - 1)
        self.selected = ids[at]

    def log_key(self, key: int) -> None:
        if key in (ord("q"), ord("Q"), ord("l"), ESCAPE):
            self.log = None
            return
        page = self.screen.getmaxyx()[0] - 2
        steps = {curses.KEY_UP: -1, curses.KEY_DOWN: 1, curses.KEY_PPAGE: -page,
                 curses.KEY_NPAGE: page}
        last = max(0, len(self.log[1]) - page)
        self.log_first = min(max(0, self.log_first + steps.get(key, 0)), last)

    def open_log(self, job_id: str) -> None:
        if client.job_document(self.layout, job_id) is None:
            self.message = f"no job file for {job_id}"
            return
        out = io.BytesIO()
        write_logs(self.layout, job_id, out)
        lines = out.getvalue().decode(errors="replace").splitlines()[-LOG_LINES:]
        self.log = (job_id, lines or ["(no output yet)"])
        self.log_first = max(0, len(self.log[1]) - (self.screen.getmaxyx()[0] - 2))

    def cancel(self, job_id: str) -> None:
        """As ``praxist-fs cancel JOB``: one control request, the coordinator's answer."""
        if live_endpoint(self.layout) is None:
            self.message = f"not cancelled: coordinator not running ({job_id})"
            return
        self.message = f"cancelling {job_id} ..."
        self.draw()
        request = client.control_request("cancel", [job_id], client.default_by(),
                                         reason="in praxist-fs top")
        try:
            reply = client.send_control(self.layout, request, CANCEL_TIMEOUT,
                                        f"cancel ({request['request_id']})")
        except (TimeoutError, client.NotYours) as exc:
            self.message = str(exc)
        else:
            self.message = " | ".join(format_control_reply(reply).splitlines())

    # -- drawing --------------------------------------------------------------

    def list_height(self) -> int:
        height = self.screen.getmaxyx()[0]
        return max(1, height - len(self.summary(height)) - 2 - DETAIL_LINES)

    def summary(self, height: int) -> list[str]:
        return self.lines[:max(1, height - 8)]  # leave the job list rows on a short screen

    def draw(self) -> None:
        height, width = self.screen.getmaxyx()
        self.screen.erase()
        if self.log is not None:
            self.draw_log(height, width)
        else:
            self.draw_view(height, width)
        self.screen.refresh()

    def draw_view(self, height: int, width: int) -> None:
        summary = self.summary(height)
        for y, line in enumerate(summary):
            self.put(y, line, width, curses.A_BOLD | (curses.A_REVERSE
                                                      if y == 0 and not self.alive else 0))
        top = len(summary)
        self.put(top, TOP_JOB_HEADER, width, curses.A_REVERSE)
        rows, shown = self.rows, self.list_height()
        at = next((i for i, row in enumerate(rows) if row["job_id"] == self.selected), 0)
        self.first = min(max(self.first, at - shown + 1), at, max(0, len(rows) - shown))
        for y, row in enumerate(rows[self.first:self.first + shown], start=top + 1):
            self.put(y, row["row"], width,
                     curses.A_REVERSE if row["job_id"] == self.selected else 0)
        if not rows:
            self.put(top + 1, "(no job matches the filter)" if self.filter else "(no jobs)",
                     width)
        detail = next((row["detail"] for row in rows if row["job_id"] == self.selected), "")
        for y, line in enumerate(textwrap.wrap(detail, max(1, width - 1))[:DETAIL_LINES],
                                 start=height - 1 - DETAIL_LINES):
            self.put(y, line, width)
        self.put(height - 1, self.footer(), width, curses.A_BOLD)

    def footer(self) -> str:
        if self.prompt == "filter":
            return f"filter: {self.filter}_  (Enter keeps it, Esc clears it)"
        if self.prompt == "cancel":
            return f"cancel {self.selected}? y/n"
        shown = f"filter '{self.filter}' ({len(self.rows)} jobs)  " if self.filter else ""
        return self.message or shown + KEYS_HELP

    def draw_log(self, height: int, width: int) -> None:
        job_id, lines = self.log
        self.put(0, f"log of {job_id} (praxist-fs logs {job_id}): last {len(lines)} lines",
                 width, curses.A_REVERSE)
        for y, line in enumerate(lines[self.log_first:self.log_first + height - 2], start=1):
            self.put(y, line, width)
        self.put(height - 1, "up/down/PgUp/PgDn scroll  q, l or Esc: back", width, curses.A_BOLD)

    def put(self, y: int, text: str, width: int, attr: int = 0) -> None:
        """One line, cut to the screen and made printable (a log may hold anything)."""
        clean = "".join(c if c.isprintable() else "?" for c in text.expandtabs())
        try:
            self.screen.addnstr(y, 0, clean, max(0, width - 1), attr)
        except curses.error:  # below the last row of a terminal shrunk meanwhile
            pass
