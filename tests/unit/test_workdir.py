"""guide_helpers.workdir: the %%to_workdir magic."""

import pytest

from guide_helpers.workdir import make_workdir


def test_the_workdir_magic_writes_a_cell_and_names_only_the_file():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        workdir = make_workdir("test_workdir_")
        result = shell.run_cell("%%to_workdir job.py\nimport sys\nprint(sys.argv)\n")
        assert result.success, result.error_in_exec
        with open(f"{workdir}/job.py") as f:
            assert f.read() == "import sys\nprint(sys.argv)\n"
    finally:
        InteractiveShell.clear_instance()
    assert workdir.split("/")[-1].startswith("test_workdir_")


def test_the_workdir_magic_prints_no_path(tmp_path, capsys):
    from guide_helpers.workdir import to_workdir

    to_workdir(str(tmp_path), "a.py", "x = 1\ny = 2\n")
    assert capsys.readouterr().out == "wrote a.py, 2 lines\n"
    assert (tmp_path / "a.py").read_text() == "x = 1\ny = 2\n"


def test_the_workdir_magic_writes_a_long_script_in_parts(tmp_path, capsys):
    from guide_helpers.workdir import to_workdir

    to_workdir(str(tmp_path), "job.py", "def f():\n    return 1\n")
    to_workdir(str(tmp_path), "job.py --append", "print(f())\n")
    assert capsys.readouterr().out == "wrote job.py, 2 lines\nadded 1 lines to job.py, now 5\n"
    assert (tmp_path / "job.py").read_text() == "def f():\n    return 1\n\n\nprint(f())\n"


def test_the_workdir_magic_says_how_it_is_used(tmp_path):
    from guide_helpers.workdir import to_workdir

    with pytest.raises(FileNotFoundError, match="without --append"):
        to_workdir(str(tmp_path), "new.py --append", "x = 1\n")
    with pytest.raises(ValueError, match="usage"):
        to_workdir(str(tmp_path), "a.py -a", "x = 1\n")
    assert list(tmp_path.iterdir()) == []
