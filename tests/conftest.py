"""Shared paths, the site build every test reads, and helpers for the site's tests."""

import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest

# The unit tests' devices: 8 emulated CPU devices, set before JAX starts its backend here (this
# file is read before any test module), as each guide's setup cell does.
jax.config.update("jax_num_cpu_devices", 8)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import guides as tools_guides  # noqa: E402  (tools/guides.py)

DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "notebooks"
BUILD = ROOT / "_build"
HTML = BUILD / "html"
# The notebooks that the test build executed (conf.py's jupyter-cache), compared with
# notebooks/*.ipynb.
EXECUTED = tools_guides.execution_cache()
BUILD_TIMEOUT = 1800
# The second profile's build has one core for every guide in series: 29 min on a two-core
# machine with 23 guides, and over 30 min on CI's (2026-12-06), so it gets twice as long.
ONE_CORE_BUILD_TIMEOUT = 2 * BUILD_TIMEOUT
IN_CI = os.environ.get("CI", "").lower() == "true"
# Sphinx renders ' and " as typographic quotes; compare text after mapping them back.
SMART_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "portability: executes every guide under a second CPU profile (`make portability`)",
    )


def guide_names():
    """Guides are the docs/*.md files with a jupytext header (the index page has none)."""
    return tools_guides.guide_names(DOCS)


def conf():
    """The names defined by conf.py (REPOSITORY_URL, colab_url, ...)."""
    return runpy.run_path(str(ROOT / "conf.py"))


def headings(md_text):
    """The ## and ### headings of a MyST page, outside code cells, as plain text."""
    text = re.sub(r"```.*?```", "", md_text, flags=re.S)
    found = re.findall(r"^#{2,3} (.+)$", text, re.M)
    return [re.sub(r"[`*]", "", h).strip() for h in found]


def sphinx_command(srcdir, outdir, doctrees, executed=None):
    """The site's build command: conf.py at the root, warnings fatal, every guide executed.

    -E reads every page again (no saved environment), so no guide escapes execution. With
    `executed`, a folder that must not exist yet, the guides are executed into a new, empty
    jupyter-cache there (myst-nb's `cache` mode with nothing cached executes every guide, once),
    which keeps each executed notebook for tests/site/test_outputs.py; without it, `force` mode.
    """
    if executed is None:
        mode = ["-D", "nb_execution_mode=force"]
    else:
        assert not Path(executed).exists(), f"{executed} must be new, so that every guide runs"
        mode = ["-D", "nb_execution_mode=cache", "-D", f"nb_execution_cache_path={executed}"]
    return [
        sys.executable, "-m", "sphinx", "-E", "-b", "html", "-c", str(ROOT), "-d", str(doctrees),
        "-W", "--keep-going", *mode, str(srcdir), str(outdir),
    ]  # fmt: skip


# In a new network namespace only loopback exists: `ip route get` to a public address fails
# there, and the command runs only if it does, so "offline" is checked, not assumed.
OFFLINE_SHELL = 'ip link set lo up && ! ip route get 192.0.2.1 >/dev/null 2>&1 && exec "$@"'


def offline_prefix():
    """A prefix that runs a command with networking cut off, or None where it cannot be done."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        return None
    prefix = ["unshare", "--net", "sh", "-c", OFFLINE_SHELL, "offline"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
    return prefix if probe.returncode == 0 else None


def run(cmd, timeout, **kwargs):
    """Run a command, bounded in time; return the completed process with merged output."""
    return subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
        **kwargs,
    )  # fmt: skip


@pytest.fixture(scope="session")
def site():
    """The real build of the site into _build/html, every guide executed once, networking cut off.

    The executed notebooks are kept in EXECUTED: tests/site/test_outputs.py compares the stored
    notebooks with them, so `make test` executes each guide once, not twice.
    Where a network namespace cannot be made (no unshare, no privileges), it builds online and
    `site.offline` is False; tests/site/test_build.py then skips its offline check (fails under
    CI).
    """
    prefix = offline_prefix()
    shutil.rmtree(EXECUTED, ignore_errors=True)
    cmd = (prefix or []) + sphinx_command(DOCS, HTML, BUILD / "doctrees", executed=EXECUTED)
    result = run(cmd, BUILD_TIMEOUT, cwd=ROOT)
    result.offline = prefix is not None
    return result


@pytest.fixture(scope="session")
def guides():
    names = guide_names()
    assert names, "no guides found in docs/"
    return names


@pytest.fixture(scope="module")
def mesh():
    """The 2 x 4 mesh ('data', 'model') that the program readers' tests compile on."""
    from jax.sharding import AxisType

    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
