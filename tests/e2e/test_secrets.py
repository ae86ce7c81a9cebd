"""Credential-shaped environment values appear only as keyed hashes outside the private
copy, which lives while the job can still launch (R-SEC-2)."""

from __future__ import annotations

import os
import stat

from .conftest import request, wait_for

TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PASSWORD = "hunter2"  # low entropy: caught by its variable's name


def files_mentioning(root, secret: str, skip) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not any(part in path.parts for part in skip):
            if secret.encode() in path.read_bytes():
                hits.append(str(path.relative_to(root)))
    return hits


def test_secrets_are_hashed_everywhere_but_reach_the_command(make_run, tmp_path):
    run = make_run(slots=1, max_slots=1)
    run.start()
    gate, seen = tmp_path / "gate", tmp_path / "seen"
    blocker = run.reply(run.submit(request(
        "blocker", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"])))["job_id"]
    run.wait_state(blocker, "running")
    env = {"PATH": os.environ["PATH"], "GITHUB_TOKEN": TOKEN, "DB_PASSWORD": PASSWORD,
           "LEARNING_RATE": "0.1"}
    body = f'echo "$GITHUB_TOKEN $DB_PASSWORD $LEARNING_RATE" > {seen}'
    job_id = run.reply(run.submit(request("secretive", ["sh", "-c", body], env=env)))["job_id"]
    private = run.sched / "private"
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    [copy] = list(private.glob("*.env.json"))
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    # while queued, a coordinator restart must not lose the secret
    run.kill()
    run.start()
    gate.touch()
    run.wait_state(job_id, "completed")
    assert seen.read_text().split() == [TOKEN, PASSWORD, "0.1"]
    wait_for(lambda: not list(private.glob("*.env.json")))  # scrubbed once terminal
    skip = {"private", "incoming", "rejected"}
    for secret in (TOKEN, PASSWORD):
        hits = [h for h in files_mentioning(run.root, secret, skip)
                if not h.startswith("logs/")]  # the command's own output is the task's
        assert hits == [], hits
    journal = (run.sched / "journal" / "journal.log").read_text()
    assert "praxist-secret:hmac-sha256:" in journal and "0.1" in journal  # others stay plain


def test_same_secret_still_deduplicates(run):
    env = {"API_KEY": "s3cr3t-value"}
    first = run.reply(run.submit(request("dedup-secret", ["true"], env=env)))
    second = run.reply(run.submit(request("dedup-secret", ["true"], env=env)))
    assert second["outcome"] == "duplicate" and second["job_id"] == first["job_id"]
    changed = run.reply(run.submit(request("dedup-secret", ["true"], env={"API_KEY": "other"})))
    assert changed["outcome"] == "duplicate" and changed["differs"] == ["env:API_KEY"]
    assert "other" not in changed["reason"]  # a changed secret is named, never shown
