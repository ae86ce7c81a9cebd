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
