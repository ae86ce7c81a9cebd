"""tools/state_diagram.py: every state table of core/states.py is drawn in
docs/PROTOCOL.md, and a table changed without its drawing fails the check."""

from __future__ import annotations

import shutil

import pytest

from praxist_fs.core.states import TABLES, NodeState, NodeTrigger

from .core.helpers import PROTOCOL, state_diagram_tool

tool = state_diagram_tool()


def test_protocol_draws_every_table_as_it_is():
    text = PROTOCOL.read_text(encoding="utf-8")
    assert set(tool.blocks(text)) == set(TABLES) == {
        "job", "attempt", "generation", "lease", "node", "reply"}
    assert tool.stale(text) == []
    assert tool.check(PROTOCOL) == 0


def _doc(tmp_path):
    doc = tmp_path / "PROTOCOL.md"
    shutil.copyfile(PROTOCOL, doc)
    return doc


def test_a_table_changed_without_its_drawing_fails_and_write_redraws_it(
        tmp_path, monkeypatch, capsys):
    doc = _doc(tmp_path)
    changed = {**TABLES["node"], (NodeState.PROBING, NodeTrigger.SUCCEED): NodeState.ONLINE}
    monkeypatch.setitem(TABLES, "node", changed)
    assert tool.main(["--check", str(doc)]) == 1
    err = capsys.readouterr().err
    assert "the node state diagram is out of date" in err
    assert "probing --> online: succeed" in err and "the job state" not in err
    assert tool.main(["--write", str(doc)]) == 0
    assert "probing --> online: succeed" in doc.read_text()
    assert tool.main(["--check", str(doc)]) == 0
    # only the node drawing changed
    before, after = PROTOCOL.read_text().splitlines(), doc.read_text().splitlines()
    assert [line for line in after if line not in before] == ["probing --> online: succeed"]


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda text: text.replace("<!-- state-diagram:lease:end -->\n", ""),
     "expected exactly one <!-- state-diagram:lease:begin --> line and one "
     "<!-- state-diagram:lease:end --> line (found 1 and 0)"),
    (lambda text: text + "\n<!-- state-diagram:job:begin -->\n",
     "expected exactly one <!-- state-diagram:job:begin -->"),
    (lambda text: text + "\n<!-- state-diagram:queue:begin -->\n<!-- state-diagram:queue:end -->\n",
     "no table for the drawing(s) queue"),
])
def test_a_missing_doubled_or_unknown_drawing_is_a_usage_error(tmp_path, capsys, edit, problem):
    doc = _doc(tmp_path)
    doc.write_text(edit(doc.read_text()))
    assert tool.main(["--check", str(doc)]) == 2
    assert problem in capsys.readouterr().err
