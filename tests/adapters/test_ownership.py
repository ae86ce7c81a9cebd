"""R-SEC-4 (adapters/ownership.py): a run's directories are the coordinator's own, found
without following links, and a start refuses any another uid could swap."""

from __future__ import annotations

import os
import re
import stat

import pytest

from praxist_fs.adapters.ownership import (
    check_ancestors, layout_problems, own_directories, secure_tree,
)
from praxist_fs.errors import UnsafeLayout

OTHER = 65534  # nobody: any uid but ours
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another uid's files need root")
TREE = {"state": 0o2750, "state/inbox": 0o3730, "state/private": 0o700}


@pytest.fixture
def run(tmp_path):
    root = tmp_path / "run"
    root.mkdir(mode=0o755)
    return root


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_tree_is_made_at_its_modes_and_kept_there(run):
    secure_tree(str(run), TREE, os.geteuid())
    assert {relative: mode(run / relative) for relative in TREE} == TREE
    (run / "state" / "inbox").chmod(0o3777)  # loosened by hand: the next start mends it
    secure_tree(str(run), TREE, os.geteuid())
    assert mode(run / "state" / "inbox") == 0o3730


def test_a_state_directory_that_is_a_link_is_refused_and_its_target_untouched(run, tmp_path):
    target = tmp_path / "closed"
    target.mkdir(mode=0o700)
    os.symlink(target, run / "state")
    with pytest.raises(UnsafeLayout) as caught:
        secure_tree(str(run), TREE, os.geteuid())
    assert str(caught.value).startswith(f"{run / 'state'}: is a symbolic link")
    assert mode(target) == 0o700 and not os.listdir(target)


def test_a_state_directory_left_open_to_others_is_refused_not_quietly_closed(run):
    secure_tree(str(run), TREE, os.geteuid())
    (run / "state" / "private").chmod(0o777)  # anyone could have planted anything there
    with pytest.raises(UnsafeLayout, match=re.escape(
            "private: is writable by everyone (mode 0777) and not sticky; another uid may")):
        secure_tree(str(run), TREE, os.geteuid())
    assert mode(run / "state" / "private") == 0o777


def test_a_state_directory_that_is_a_file_is_refused(run):
    (run / "state").write_text("")
    with pytest.raises(UnsafeLayout, match="is not a directory"):
        secure_tree(str(run), TREE, os.geteuid())


@needs_root
def test_another_uids_state_directory_is_refused_and_left_as_it_is(run):
    (run / "state").mkdir()
    (run / "state").chmod(0o777)
    os.chown(run / "state", OTHER, OTHER)
    with pytest.raises(UnsafeLayout, match=f"is owned by uid {OTHER}, not by uid 0"):
        secure_tree(str(run), TREE, os.geteuid())
    assert mode(run / "state") == 0o777 and not os.listdir(run / "state")


@pytest.mark.parametrize(("run_mode", "refused"), [
    (0o2770, "its group (mode 2770)"), (0o0757, "everyone (mode 0757)"),
    (0o3770, None), (0o2750, None)])  # sticky, or not writable by others: fine
def test_the_run_directory_must_be_writable_by_no_one_else_unless_sticky(
        run, run_mode, refused):
    run.chmod(run_mode)
    if refused is None:
        secure_tree(str(run), TREE, os.geteuid())
        return
    with pytest.raises(UnsafeLayout, match=re.escape(f"is writable by {refused}")) as caught:
        secure_tree(str(run), TREE, os.geteuid())
    assert f"chmod {run_mode & ~0o022:04o} it" in str(caught.value)
    assert not (run / "state").exists()


def test_a_loose_ancestor_is_refused_a_sticky_one_is_fine(tmp_path):
    parent = tmp_path / "shared"
    parent.mkdir()
    root = parent / "run"
    parent.chmod(0o777)
    with pytest.raises(UnsafeLayout, match=f"{parent}: is writable by everyone"):
        check_ancestors(str(root), os.geteuid())
    parent.chmod(0o1777)  # as /tmp
    check_ancestors(str(root), os.geteuid())


def test_a_link_on_the_way_counts_the_directory_that_holds_it(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    loose = tmp_path / "loose"
    loose.mkdir()
    os.symlink(real, loose / "link")
    check_ancestors(str(loose / "link" / "run"), os.geteuid())
    loose.chmod(0o777)  # anyone could point the link elsewhere
    with pytest.raises(UnsafeLayout, match=f"{loose}: is writable by everyone"):
        check_ancestors(str(loose / "link" / "run"), os.geteuid())


@needs_root
def test_an_ancestor_of_another_uid_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(UnsafeLayout, match=f"is owned by uid {OTHER}, who could rename"):
        check_ancestors(str(theirs / "run"), os.geteuid())


def test_status_lists_the_problems_and_changes_nothing(run):
    secure_tree(str(run), TREE, os.geteuid())
    assert layout_problems(str(run), TREE, os.geteuid()) == []
    run.chmod(0o2770)
    (run / "state" / "inbox").chmod(0o3777)  # sticky: allowed, though not its mode
    (run / "state" / "private").chmod(0o777)
    problems = layout_problems(str(run), TREE, os.geteuid())
    assert [p.split(": ", 1)[0] for p in problems] == [str(run), str(run / "state/private")]
    assert mode(run) == 0o2770 and mode(run / "state" / "private") == 0o777


def test_an_attempts_directories_are_made_ours_and_never_through_a_link(run, tmp_path):
    made = own_directories(str(run), "job", "a1")
    assert made == str(run / "job" / "a1") and mode(made) == 0o755
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, run / "planted")
    with pytest.raises(UnsafeLayout, match="planted: is a symbolic link"):
        own_directories(str(run), "planted", "a1")
    assert not os.listdir(elsewhere)


def test_a_run_under_directories_not_made_yet_is_made_with_them_ours(tmp_path):
    """``serve --run-dir ~/runs/new/run`` with ``~/runs`` not there yet: the start makes
    it (it once died on a FileNotFoundError from the ancestors' check)."""
    from praxist_fs.adapters.layout import RunLayout

    layout = RunLayout.at(tmp_path / "runs" / "new" / "run")
    layout.create()
    assert layout.scheduler.is_dir()
    for made in (tmp_path / "runs", tmp_path / "runs" / "new"):
        info = os.lstat(made)
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (os.geteuid(), 0o755)


@needs_root
def test_an_ancestor_another_uid_makes_while_the_start_makes_the_rest_is_refused(
        tmp_path, monkeypatch):
    """Between the ancestors' check and the start's mkdir -p, another uid makes one of
    the missing directories (in a sticky /tmp, anyone may): the start checks again once
    they are all there, and refuses."""
    from praxist_fs.adapters import layout as layout_module

    made = layout_module.makedirs
    theirs = tmp_path / "theirs"

    def raced(path, **options):
        theirs.mkdir()
        os.chown(theirs, OTHER, OTHER)
        made(path, **options)

    monkeypatch.setattr(layout_module, "makedirs", raced)
    with pytest.raises(UnsafeLayout, match=f"{theirs}: is owned by uid {OTHER}"):
        layout_module.RunLayout.at(theirs / "run").create()


@needs_root
def test_a_link_on_the_way_owned_by_another_uid_is_refused(tmp_path):
    """In a sticky directory (as /tmp) anyone may make a link, and its owner may replace
    it later and point the run elsewhere; a start refuses one another uid owns, which
    is also what refuses such a link made while the start made the missing rest."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, sticky / "link")
    check_ancestors(str(sticky / "link" / "run"), os.geteuid())  # ours: fine
    os.lchown(sticky / "link", OTHER, OTHER)
    with pytest.raises(UnsafeLayout, match=f"{sticky / 'link'}: is a symbolic link owned by "
                                           f"uid {OTHER}"):
        check_ancestors(str(sticky / "link" / "run"), os.geteuid())
