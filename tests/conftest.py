"""Shared paths and helpers for the site's tests."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "notebooks"
BUILD = ROOT / "_build"
HTML = BUILD / "html"


def guide_names():
    """Guides are the docs/*.md files with a jupytext header (the index page has none)."""
    return sorted(
        p.stem for p in DOCS.glob("*.md") if re.search(r"^jupytext:", p.read_text(), re.M)
    )


def sphinx_command(srcdir, outdir, doctrees):
    """The site's build command: conf.py at the root, warnings fatal, every guide executed.

    -E reads every page again (no saved environment), so no guide escapes execution.
    """
    return [
        sys.executable, "-m", "sphinx", "-E", "-b", "html", "-c", str(ROOT), "-d", str(doctrees),
        "-W", "--keep-going", "-D", "nb_execution_mode=force", str(srcdir), str(outdir),
    ]  # fmt: skip


def run(cmd, timeout, **kwargs):
    """Run a command, bounded in time; return the completed process with merged output."""
    return subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
        **kwargs,
    )  # fmt: skip


@pytest.fixture(scope="session")
def guides():
    names = guide_names()
    assert names, "no guides found in docs/"
    return names
