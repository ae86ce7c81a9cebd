"""R-RUN-1: the command's environment is the request's, with the coordinator's PATH as the
one default (docs/PROTOCOL.md section 6), added at launch and never to the request."""

from __future__ import annotations

import json
import os

from .conftest import request

PRINT_PATH = ["sh", "-c", 'echo "$PATH ${X-None}"']


def journaled_request(run, request_id: str) -> dict:
    for line in (run.sched / "journal" / "journal.log").read_text().splitlines():
        event = json.loads(line.split(" ", 2)[2])
        if event["type"] == "request_seen" and event["request_id"] == request_id:
            return event["request"]
    raise AssertionError(f"no request_seen for {request_id}")


def test_a_request_without_path_gets_the_coordinators_and_keeps_its_identity(make_run, tmp_path):
    tools = tmp_path / "tools"  # on the coordinator's PATH only: not on /bin:/usr/bin
    tools.mkdir()
    (tools / "praxist-path-probe").write_text("#!/bin/sh\necho probe found\n")
    (tools / "praxist-path-probe").chmod(0o755)
    coordinator_path = f"{tools}:{os.environ['PATH']}"
    run = make_run()
    run.start(env={"PATH": coordinator_path})

    def ended(tag, argv, **fields):
        reply = run.reply(run.submit(request(tag, argv, **fields)))
        job = run.wait_state(reply["job_id"], "completed", "failed")
        log = run.root / "logs" / "experiments" / reply["job_id"] / "a1.log"
        return reply["request_id"], job, log.read_text()

    rid, job, log = ended("python3", ["python3", "-c", "print('ran')"])  # printf + mv: no env
    assert (job["exit_code"], log) == (0, "ran\n")
    assert journaled_request(run, rid)["env"] == {}  # the request stays as submitted

    _, job, log = ended("no-env", PRINT_PATH)
    assert (job["exit_code"], log) == (0, f"{coordinator_path} None\n")
    again = run.reply(run.submit(request("no-env", PRINT_PATH)))
    assert again["outcome"] == "duplicate"  # the same fingerprint as before

    _, job, log = ended("lookup", ["praxist-path-probe"])  # argv[0] found on that PATH
    assert (job["exit_code"], log) == (0, "probe found\n")

    _, job, log = ended("env-without-path", PRINT_PATH, env={"X": "1"})
    assert (job["exit_code"], log) == (0, f"{coordinator_path} 1\n")

    rid, job, log = ended("own-path", PRINT_PATH, env={"PATH": os.environ["PATH"], "X": "2"})
    assert (job["exit_code"], log) == (0, f"{os.environ['PATH']} 2\n")  # given PATH wins
    assert journaled_request(run, rid)["env"] == {"PATH": os.environ["PATH"], "X": "2"}
