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
