"""The gates themselves: a failing cell and a deprecation warning fail the build.

Each test builds or checks a tiny throwaway guide, so it proves the machinery that guards the
real guides without executing them again.
"""

import sys
from pathlib import Path

from conftest import ROOT, run, sphinx_command
from support.sites import write_site


def test_failing_cell_and_deprecation_warning_fail_the_build(tmp_path):
    src = tmp_path / "docs"
    write_site(
        src,
        {
            "broken_guide": "print('before')\n1 / 0",
            "warning_guide": (
                "import warnings\n"
                "warnings.warn('old_api is deprecated', DeprecationWarning, stacklevel=1)"
            ),
        },
    )
    result = run(sphinx_command(src, tmp_path / "html", tmp_path / "doctrees"), 600, cwd=ROOT)
    out = result.stdout
    assert result.returncode != 0, out
    # The failing cell: the guide, the cell's code and the traceback, in the console output.
    assert "broken_guide" in out and "Executing notebook failed" in out, out
    assert "ZeroDivisionError" in out and "1 / 0" in out, out
    # Stderr in a cell is a warning naming the guide and the cell, and -W makes it fatal.
    assert "warning_guide.md" in out and "stderr was found in the cell outputs" in out, out


def make_html(*args):
    """`make html` in the repository with the given overrides (a VENV under tmp_path)."""
    return run(["make", "--no-print-directory", "html", *args], 300, cwd=ROOT)


def test_make_html_names_a_missing_python(tmp_path):
    result = make_html("PYTHON=python3-not-here", f"VENV={tmp_path / 'venv'}")
    assert result.returncode != 0
    assert "error: 'python3-not-here' not found" in result.stdout, result.stdout


def test_make_html_names_a_python_without_venv_support(tmp_path):
    # A python3 whose venv module is missing, as on Debian without python3-venv.
    fake = tmp_path / "python3"
    fake.write_text(
        f'#!/bin/sh\ncase "$*" in *"import venv"*) exit 1;; esac\nexec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    result = make_html(f"PYTHON={fake}", f"VENV={tmp_path / 'venv'}")
    assert result.returncode != 0
    assert "cannot create virtual environments" in result.stdout, result.stdout
    assert "apt-get install python3-venv" in result.stdout, result.stdout
    assert not (tmp_path / "venv").exists()


def test_make_html_names_a_broken_environment(tmp_path):
    # An environment that was installed once and has since lost its packages.
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)], 120).returncode == 0
    (venv / ".installed").touch()
    result = make_html(f"VENV={venv}")
    assert result.returncode != 0
    assert f"the environment in {venv} is broken" in result.stdout, result.stdout
    assert "No module named" in result.stdout and "rm -rf" in result.stdout, result.stdout


def test_a_missing_browser_skips_locally_and_fails_under_ci(tmp_path):
    """No Chromium on PATH: a skip that says how to install it; under CI=true, a failure."""
    test = f"{ROOT / 'tests' / 'site' / 'test_browser.py'}::test_index_page_links_every_guide"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", test]
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}
    local = run(cmd, 300, cwd=ROOT, env=env)
    assert "1 skipped" in local.stdout and "apt-get install chromium" in local.stdout, local.stdout
    in_ci = run(cmd, 300, cwd=ROOT, env={**env, "CI": "true"})
    assert in_ci.returncode == 1 and "1 error" in in_ci.stdout, in_ci.stdout
    assert "Under CI=true this is a failure" in in_ci.stdout, in_ci.stdout
