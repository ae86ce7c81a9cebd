"""parse_request against hostile bytes (R-SUB-1, R-FS-5): every rejection names a field."""

from __future__ import annotations

import json

import pytest

from praxist_fs.core.request import (
    EXPLAINED_BYTES, FIELDS, MAX_REQUEST_BYTES, Request, parse_request,
    request_id_from_filename,
)
from praxist_fs.errors import BadRequest

BASE = {"peer": "peer-a", "tag": "exp-1", "argv": ["python", "train.py"]}


def doc(**changes) -> bytes:
    """BASE with changes; a value of ... drops the key."""
    d = dict(BASE)
    for key, value in changes.items():
        if value is ...:
            d.pop(key, None)
        else:
            d[key] = value
    return json.dumps(d).encode()


def with_raw(key: str, raw_json: str) -> bytes:
    """BASE plus one key whose value is written as raw JSON text."""
    body = json.dumps(BASE)[:-1]
    return f'{body}, "{key}": {raw_json}}}'.encode()


GOOD = json.dumps(BASE)

# (id, bytes, field, words that must all appear in the problem, case-insensitive)
HOSTILE = [
    ("truncated", GOOD[:-5].encode(), "<file>", ["json"]),
    ("empty", b"", "<file>", ["empty"]),
    ("whitespace only", b"  \n\t ", "<file>", ["empty"]),
    ("invalid utf-8", GOOD.replace("exp-1", "exp-\xff").encode("latin-1"), "<file>", ["utf-8"]),
    ("utf-8 bom", b"\xef\xbb\xbf" + GOOD.encode(), "<file>", ["byte order mark"]),
    ("utf-16 with bom", GOOD.encode("utf-16"), "<file>", ["byte order mark"]),
    ("utf-16-be with bom", b"\xfe\xff" + GOOD.encode("utf-16-be"), "<file>", ["byte order mark"]),
    ("utf-16-le without bom", GOOD.encode("utf-16-le"), "<file>", ["json"]),
    ("duplicate key", b'{"peer": "a", "tag": "t", "argv": ["x"], "tag": "u"}', "tag", ["duplicate"]),
    ("duplicate peer", b'{"peer": "a", "peer": "a", "tag": "t", "argv": ["x"]}', "peer", ["duplicate"]),
    ("unknown field", doc(niceness=5), "niceness", ["unknown"]),
    ("misspelled field", doc(work_clas="scout"), "work_clas", ["unknown"]),
    ("NaN", with_raw("eta_s", "NaN"), "<file>", ["nan"]),
    ("Infinity", with_raw("eta_s", "Infinity"), "<file>", ["infinity"]),
    ("-Infinity", with_raw("eta_s", "-Infinity"), "<file>", ["-infinity"]),
    ("huge int literal", with_raw("generation", "1" + "0" * 5000), "<file>", ["json"]),
    ("nesting 100000 deep", with_raw("env", "[" * 100000 + "]" * 100000), "<file>", []),
    ("nesting 30000 deep, under size limit", with_raw("env", "[" * 30000 + "]" * 30000),
     "<file>", ["nested"]),
    ("top level list", b'[{"peer": "a"}]', "<file>", ["list", "object"]),
    ("top level string", b'"hello"', "<file>", ["string", "object"]),
    ("top level null", b"null", "<file>", ["null", "object"]),
    ("top level number", b"42", "<file>", ["object"]),
    ("missing peer", doc(peer=...), "peer", ["missing"]),
    ("missing tag", doc(tag=...), "tag", ["missing"]),
    ("both argv and command", doc(command="ls"), "argv", ["command"]),
    ("neither argv nor command", doc(argv=...), "argv", ["command"]),
    ("argv a string", doc(argv="python train.py"), "argv", ["string", "list"]),
    ("argv with a non-string", doc(argv=["python", 3]), "argv[1]", ["integer", "string"]),
    ("argv with null", doc(argv=["python", None]), "argv[1]", ["null"]),
    ("argv empty list", doc(argv=[]), "argv", ["non-empty"]),
    ("argv with empty string", doc(argv=["python", ""]), "argv[1]", ["empty"]),
    ("command not a string", doc(argv=..., command=["ls"]), "command", ["string"]),
    ("env not an object", doc(env=["A=1"]), "env", ["object"]),
    ("env non-string value", doc(env={"A": 1}), "env.A", ["string"]),
    ("env bad name A=B", doc(env={"A=B": "1"}), "env.A=B", ["name"]),
    ("env name starting with digit", doc(env={"1A": "x"}), "env.1A", ["name"]),
    ("env value with NUL", doc(env={"A": "x\x00y"}), "env.A", ["nul"]),
    ("tag ../x", doc(tag="../x"), "tag", ["not allowed"]),
    ("tag /etc/passwd", doc(tag="/etc/passwd"), "tag", ["not allowed"]),
    ("tag .hidden", doc(tag=".hidden"), "tag", ["not allowed"]),
    ("tag -x", doc(tag="-x"), "tag", ["not allowed"]),
    ("tag a/..", doc(tag="a/.."), "tag", ["not allowed"]),
    ("tag newline", doc(tag="a\nb"), "tag", ["not allowed"]),
    ("tag NUL", doc(tag="a\x00b"), "tag", ["nul"]),
    ("tag non-ascii", doc(tag="\u00e9"), "tag", ["not allowed"]),
    ("tag 129 chars", doc(tag="a" * 129), "tag", ["128"]),
    ("tag empty", doc(tag=""), "tag", ["empty"]),
    ("tag a number", doc(tag=7), "tag", ["string"]),
    ("tag lone surrogate", GOOD.replace('"exp-1"', '"\\ud800"').encode(), "tag", ["surrogate"]),
    ("peer with slash", doc(peer="a/b"), "peer", ["not allowed"]),
    ("request_id with slash", doc(request_id="../r"), "request_id", ["not allowed"]),
    ("work_class urgent", doc(work_class="urgent"), "work_class", ["scout", "ordinary", "mature"]),
    ("work_class a list", doc(work_class=["scout"]), "work_class", ["scout"]),
    ("eta_s true", doc(eta_s=True), "eta_s", ["seconds"]),
    ("eta_s -1", doc(eta_s=-1), "eta_s", ["seconds"]),
    ("eta_s zero", doc(eta_s=0), "eta_s", ["seconds"]),
    ("eta_s string", doc(eta_s="5"), "eta_s", ["seconds"]),
    ("admission_timeout_s zero", doc(admission_timeout_s=0), "admission_timeout_s",
     ["seconds", "2592000"]),
    ("admission_timeout_s string", doc(admission_timeout_s="60"), "admission_timeout_s",
     ["seconds"]),
    ("admission_timeout_s too long", doc(admission_timeout_s=10 ** 9), "admission_timeout_s",
     ["seconds"]),
    ("retry_terminal yes", doc(retry_terminal="yes"), "retry_terminal", ["true or false"]),
    ("retry_terminal 1", doc(retry_terminal=1), "retry_terminal", ["true or false"]),
    ("generation -1", doc(generation=-1), "generation", ["non-negative"]),
    ("generation float", doc(generation=1.5), "generation", ["integer"]),
    ("generation bool", doc(generation=True), "generation", ["integer"]),
    ("cwd relative", doc(cwd="work/dir"), "cwd", ["absolute"]),
    ("profile with slash", doc(profile="../gpu"), "profile", ["not allowed"]),
    ("lease not a name", doc(lease="gen_1/leases/x"), "lease", ["not allowed"]),
    ("oversize", doc(command=None, argv=["x" * MAX_REQUEST_BYTES]), "<file>",
     [str(MAX_REQUEST_BYTES)]),
]


@pytest.mark.parametrize(("data", "field", "words"), [c[1:] for c in HOSTILE],
                         ids=[c[0] for c in HOSTILE])
def test_hostile_request_is_rejected_naming_the_field(data, field, words):
    with pytest.raises(BadRequest) as info:
        parse_request("req-1.json", data)
    assert info.value.field == field
    problem = info.value.problem
    assert isinstance(problem, str) and problem.strip()
    for word in words:
        assert word.lower() in problem.lower(), problem
    # the message is usable in an error file
    json.dumps({"field": info.value.field, "problem": problem})


def test_oversize_is_exactly_one_byte_over():
    filler = b" " * (MAX_REQUEST_BYTES - len(GOOD.encode()))
    at_limit = GOOD.encode() + filler
    assert len(at_limit) == MAX_REQUEST_BYTES
    assert parse_request("r.json", at_limit).tag == "exp-1"
    with pytest.raises(BadRequest) as info:
        parse_request("r.json", at_limit + b" ")
    assert info.value.field == "<file>"
    assert str(MAX_REQUEST_BYTES) in info.value.problem


def test_oversize_mostly_env_says_so_with_the_env_size():
    """What ``praxist-fs launch`` sends from a crowded shell: the refusal says the env is
    what filled the request, and about how much of it."""
    env = {f"VAR_{i}": "v" * 100 for i in range(700)}
    data = doc(env=env)
    assert MAX_REQUEST_BYTES < len(data) <= EXPLAINED_BYTES
    with pytest.raises(BadRequest) as info:
        parse_request("r.json", data)
    held = len(json.dumps(env).encode())
    assert info.value.field == "<file>"
    assert info.value.problem == (f"larger than {MAX_REQUEST_BYTES} bytes; its env holds "
                                  f"about {held} of them: submit fewer variables")


@pytest.mark.parametrize("data", [
    doc(command=None, argv=["x" * MAX_REQUEST_BYTES], env={"A": "1"}),  # not the env
    doc(env={"A": "v" * EXPLAINED_BYTES}),  # too large to be parsed for an explanation
    b'{"env": {"A": "' + b"v" * MAX_REQUEST_BYTES,  # not JSON
    b"[" + json.dumps({"A": "v" * MAX_REQUEST_BYTES}).encode() + b"]",  # not an object
])
def test_oversize_names_no_env_it_cannot_blame(data):
    with pytest.raises(BadRequest) as info:
        parse_request("r.json", data)
    assert info.value.problem == f"larger than {MAX_REQUEST_BYTES} bytes"


@pytest.mark.parametrize("tag", ["a", "A9", "exp_1.v2+seed=3@tier,x-y", "a" * 128, "0.."])
def test_safe_tags_are_accepted(tag):
    assert parse_request("r.json", doc(tag=tag)).tag == tag


# -- valid requests ---------------------------------------------------------------


def test_minimal_request_gets_defaults():
    r = parse_request("my-req_1.json", doc())
    assert r == Request(request_id="my-req_1", peer="peer-a", tag="exp-1",
                        argv=("python", "train.py"))
    assert r.profile is None and r.work_class == "ordinary" and r.eta_s is None
    assert r.command is None and r.cwd is None and r.env == {}
    assert r.retry_terminal is False and r.generation is None and r.lease is None


def test_explicit_request_id_overrides_the_file_name():
    r = parse_request("file-name.json", doc(request_id="explicit-7"))
    assert r.request_id == "explicit-7"


def test_explicit_request_id_rescues_an_unsafe_file_name():
    assert parse_request("odd name!.json", doc(request_id="ok-1")).request_id == "ok-1"
    with pytest.raises(BadRequest) as info:
        parse_request("odd name!.json", doc())
    assert info.value.field == "request_id"


def test_command_string():
    r = parse_request("c.json", doc(argv=..., command="python train.py | tee out"))
    assert r.command == "python train.py | tee out" and r.argv is None


def test_every_field_parses():
    full = {
        "peer": "p1", "tag": "t1", "profile": "gpu", "work_class": "mature", "eta_s": 90,
        "argv": ["a", "b c"], "cwd": "/srv/work", "env": {"SEED": "3", "EMPTY": ""},
        "retry_terminal": True, "lease": "lease-1", "request_id": "rid", "generation": 2,
        "max_cost": 2.5, "after": [{"job": "t0", "when": "any"}], "hold": True,
        "priority": -5, "admission_timeout_s": 600,
        "slurm": {"time_limit_minutes": 30, "partition": "gpu", "options": ["--exclusive"]},
    }
    assert set(full) | {"command"} == set(FIELDS)
    r = parse_request("x.json", json.dumps(full).encode())
    assert r.to_dict() == {**full, "argv": ["a", "b c"], "eta_s": 90.0, "command": None,
                           "admission_timeout_s": 600.0}
    assert isinstance(r.eta_s, float)


@pytest.mark.parametrize("work_class", ["scout", "ordinary", "mature"])
def test_work_classes(work_class):
    assert parse_request("x.json", doc(work_class=work_class)).work_class == work_class


def test_null_optional_fields_mean_absent():
    r = parse_request("x.json", doc(profile=None, eta_s=None, cwd=None, lease=None,
                                    generation=None, command=None, max_cost=None,
                                    admission_timeout_s=None))
    assert r == parse_request("x.json", doc())


@pytest.mark.parametrize(("name", "expected"), [
    ("abc.json", "abc"),
    ("a.b-c_d+e=f@g,h.json", "a.b-c_d+e=f@g,h"),
    ("x.json.json", "x.json"),
    (".hidden.json", None),
    ("-x.json", None),
    ("a b.json", None),
    ("abc.txt", None),
    ("abc.json.tmp", None),
    ("abc", None),
    (".json", None),
    ("../x.json", None),
    ("a/b.json", None),
    ("\u00e9.json", None),
    ("a\n.json", None),
    ("a" * 129 + ".json", None),
])
def test_request_id_from_filename(name, expected):
    assert request_id_from_filename(name) == expected


@pytest.mark.parametrize("changes", [
    {},
    {"argv": ..., "command": "echo hi"},
    {"env": {"A": "1", "B": ""}, "cwd": "/tmp/x", "eta_s": 1.5, "work_class": "scout"},
    {"profile": "gpu", "retry_terminal": True, "lease": "L1", "generation": 0},
])
def test_round_trip_through_dict_and_json(changes):
    r = parse_request("rt.json", doc(**changes))
    assert Request.from_dict(r.to_dict()) == r
    assert Request.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_duplicate_key_inside_env_names_its_path():
    data = b'{"peer": "a", "tag": "t", "argv": ["x"], "env": {"peer": "1", "peer": "2"}}'
    with pytest.raises(BadRequest) as info:
        parse_request("r.json", data)
    assert info.value.field == "env.peer"
