"""Hostile request files (R-SEC-1): each is rejected with a reason naming the field,
kept in spool/rejected/, and the coordinator keeps serving."""

from __future__ import annotations

import json
import os

import pytest

from praxist_fs.core.request import MAX_REQUEST_BYTES

from .conftest import read_json, request, wait_for

CASES = [
    ("invalid-json", b'{"peer": "p", "tag": ', "<file>"),
    ("invalid-utf8", b'{"peer": "p\xff", "tag": "t", "argv": ["true"]}', "<file>"),
    ("duplicate-keys", b'{"peer": "p", "tag": "a", "tag": "b", "argv": ["true"]}', "tag"),
    ("wrong-type", b'{"peer": "p", "tag": "t", "argv": "true"}', "argv"),
    ("unknown-field", b'{"peer": "p", "tag": "t", "argv": ["true"], "gpus": 2}', "gpus"),
    ("nan", b'{"peer": "p", "tag": "t", "argv": ["true"], "eta_s": NaN}', "<file>"),
    ("tag-traversal", b'{"peer": "p", "tag": "x/../../journal", "argv": ["true"]}', "tag"),
    ("tag-control", b'{"peer": "p", "tag": "a\\u0007b", "argv": ["true"]}', "tag"),
    ("argv-not-strings", b'{"peer": "p", "tag": "t", "argv": ["echo", 3]}', "argv[1]"),
    ("oversized", b'{"peer": "p", "tag": "t", "argv": ["' + b"x" * 70000 + b'"]}', "<file>"),
]


@pytest.mark.parametrize("name,data,field", CASES, ids=[c[0] for c in CASES])
def test_hostile_request_is_rejected_with_the_field_named(run, name, data, field):
    run.drop_raw(f"{name}.json", data)
    reply = run.reply(name)
    assert reply["outcome"] == "rejected" and reply["job_id"] is None
    error = read_json(run.sched / "spool" / "rejected" / f"{name}.json.error.json")
    assert error["field"] == field and error["problem"]
    assert (run.sched / "spool" / "rejected" / f"{name}.json").read_bytes() == data
    good = run.reply(run.submit(request(f"after-{name}")))
    assert good["outcome"] == "accepted" and run.proc.poll() is None


def test_a_request_too_large_for_its_env_is_refused_saying_so(run):
    env = {f"VAR_{i}": "v" * 100 for i in range(700)}
    reply = run.reply(run.submit(request("crowded-env", env=env), name="crowded.json"))
    assert reply["outcome"] == "rejected" and reply["field"] == "<file>"
    assert reply["problem"] == (f"larger than {MAX_REQUEST_BYTES} bytes; its env holds about "
                                f"{len(json.dumps(env).encode())} of them: submit fewer variables")


def test_symlink_is_rejected_not_followed(run, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(request("stolen")))
    os.symlink(secret, run.sched / "spool" / "incoming" / "link.json")
    reply = run.reply("link")
    assert reply["outcome"] == "rejected" and "link" in reply["reason"]
    assert os.path.islink(run.sched / "spool" / "rejected" / "link.json")
    assert secret.exists()
    assert run.reply(run.submit(request("after-link")))["outcome"] == "accepted"


def test_ignored_names_are_left_alone(run):
    incoming = run.sched / "spool" / "incoming"
    (incoming / ".hidden.json").write_text("{}")
    (incoming / "notes.txt").write_text("hello")
    rid = run.submit(request("next"))
    assert run.reply(rid)["outcome"] == "accepted"
    assert (incoming / ".hidden.json").exists() and (incoming / "notes.txt").exists()


def test_unsafe_file_name_is_rejected_without_a_reply(run):
    run.drop_raw("bad name!.json", json.dumps(request("x")).encode())
    error_file = run.sched / "spool" / "rejected" / "bad name!.json.error.json"
    error = wait_for(lambda: read_json(error_file))
    assert error["field"] == "request_id"


def test_reused_request_id_with_other_content_is_rejected_and_reply_kept(run):
    first = run.reply(run.submit(request("one"), name="same.json"))
    run.submit(request("two"), name="same.json")
    error = wait_for(lambda: read_json(run.sched / "spool" / "rejected" / "same.json.error.json"))
    assert error["field"] == "request_id"
    assert run.reply("same") == first
