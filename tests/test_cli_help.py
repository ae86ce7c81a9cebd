"""Every command's --help explains every option it has (issue 13, item 8)."""

from __future__ import annotations

import argparse

import pytest

from praxist_fs.cli import _parser

COMMANDS = _parser()._subparsers._group_actions[0].choices


@pytest.mark.parametrize("name", ["launch", "cancel", "hold", "release", "update", "status",
                                  "stop", "jobs", "logs", "wait", "raise-budget", "top"])
def test_every_option_of_a_command_has_help(name):
    parser = COMMANDS[name]
    missing = [action.option_strings or [action.dest] for action in parser._actions
               if not isinstance(action, argparse._HelpAction) and not action.help]
    assert missing == []
    assert not any(word in parser.format_help() for word in ("TODO", "XXX", "FIXME"))


def test_each_verb_is_parsed_by_its_own_module_alone():
    """The CLI imports only the module of the verb it runs (R-PERF-3): every verb the
    full parser lists must be found that way, under the name it is called by."""
    from praxist_fs.cli import VERBS, _parser

    def verbs(parser):
        [sub] = [a for a in parser._actions if a.dest == "command"]
        return set(sub.choices)

    assert verbs(_parser()) == set(VERBS)
    for verb, module in VERBS.items():
        if module is not None:
            assert verb in verbs(_parser(verb)), (verb, module)


@pytest.mark.parametrize("verb, options", [("logs", []), ("wait", []),
                                           ("cancel", ["--timeout", "1"])])
def test_a_verb_that_names_a_job_starts_without_the_request_model(verb, options, tmp_path):
    """``logs``, ``wait`` and ``cancel`` name a job by its id or tag: they check the name,
    and never load the request model (and the policy it imports) to do so (R-PERF-3)."""
    import json
    import subprocess
    import sys

    from praxist_fs.adapters.layout import RunLayout

    RunLayout.at(tmp_path / "run").create()
    code = ("import sys\nfrom praxist_fs.cli import main\ntry:\n"
            f"    main([{verb!r}, 'no-such-job', '--run-dir', {str(tmp_path / 'run')!r}, "
            f"*{options!r}])\n"
            "except SystemExit:\n    pass\n"
            "import json\nprint(json.dumps(sorted(m for m in sys.modules "
            "if m.startswith('praxist_fs'))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert "praxist_fs.client" in loaded, done.stderr  # it did look for the job
    assert "praxist_fs.core.request" not in loaded


@pytest.mark.parametrize("verb", [["status"], ["jobs", "--limit", "20"]])
def test_a_reading_verb_loads_no_socket_hashing_or_logging(verb, tmp_path):
    """``status`` and ``jobs`` name no job and log nothing: they start without socket
    (the endpoint's host is the kernel's nodename), hashlib (OpenSSL, for job ids) and
    logging (the coordinator's), a few milliseconds of every call (R-PERF-3)."""
    import json
    import subprocess
    import sys

    from praxist_fs.adapters.layout import RunLayout

    RunLayout.at(tmp_path / "run").create()
    code = ("import sys\nfrom praxist_fs.cli import main\ntry:\n"
            f"    main([*{verb!r}, '--run-dir', {str(tmp_path / 'run')!r}])\n"
            "except SystemExit:\n    pass\n"
            "import json\nprint(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "praxist_fs.client" in loaded, done.stderr  # it did read the run
    assert loaded.isdisjoint({"socket", "hashlib", "logging"}), loaded & {"socket", "hashlib",
                                                                          "logging"}


def test_launch_starts_without_the_config_and_the_backends():
    """``launch`` to a live coordinator only writes a request and follows it: the task
    file's loader, the backends and the peer-local launcher (about 80 ms of imports) are
    loaded only when no coordinator is live (R-PERF-3)."""
    import json
    import subprocess
    import sys

    code = ("import sys, json\nimport praxist_fs.cli\nimport praxist_fs.commands.launch\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('praxist_fs'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "praxist_fs.commands.launch" in loaded, done.stderr
    assert not {m for m in loaded if m in ("praxist_fs.legacy", "praxist_fs.config")
                or m.startswith("praxist_fs.backends")}
