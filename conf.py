"""Sphinx configuration for the site. The sources are in docs/; this file sits at the root.

Build with `make html`; CI and Read the Docs build with `nb_execution_mode=force`, so every guide
is executed on every build and any failing cell, warning or stderr output fails the build.
"""

import os
import shutil
from pathlib import Path

# The one setting a fork changes: the GitHub repository that holds this site. The theme's
# repository button, the "Open in Colab" buttons and the Colab link inside each notebook all
# point here (`make sync` rewrites the notebooks' links after you change it).
REPOSITORY_URL = "https://github.com/flax-sharding-executed/guides"
REPOSITORY_BRANCH = "main"
COLAB = "https://colab.research.google.com"


def helpers_requirement():
    """What a guide's Colab setup cell installs for `import guide_helpers`: this repository."""
    return f"guide-helpers @ git+{REPOSITORY_URL}@{REPOSITORY_BRANCH}"


def colab_url(name):
    """Colab opens the committed notebook, notebooks/NAME.ipynb (it cannot open the md)."""
    path = REPOSITORY_URL.split("github.com/", 1)[1]
    return f"{COLAB}/github/{path}/blob/{REPOSITORY_BRANCH}/notebooks/{name}.ipynb"


project = "Flax sharding, executed"
author = "The project's contributors"
copyright = "2026, the project's contributors"

extensions = ["myst_nb", "sphinx-mathjax-offline"]  # the second: MathJax, copied into _static

root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]

# MyST: ::: fences for admonitions, $math$ and $$math$$ (docs/notation.md's letters), and
# heading anchors for #links within a page.
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

# Notebook execution. `cache` (jupyter-cache) re-executes a guide only when its code changes:
# right for local edits. CI and Read the Docs pass `-D nb_execution_mode=force`.
nb_execution_mode = "cache"
# The one execution cache: the site's, the stored notebooks' (`make execute` copies their outputs
# from it, tools/store_outputs.py) and the tests' build (tests/conftest.py starts it afresh).
nb_execution_cache_path = str(Path(__file__).resolve().parent / "_build" / "executed")
nb_execution_timeout = 600
# tests/site/test_portability.py runs two builds at once, one per core, each executing half of
# the guides: SITE_EXECUTE_ONLY names a build's half (comma-separated), and every other page
# renders without executing. Unset, every guide executes. An unexecuted page has no kernel's
# lexer, so Pygments reads its cell magics (`%%to_workdir`) as Python and warns: that warning is
# left out of these builds only (make test's build, which executes every page, still fails on it).
if os.environ.get("SITE_EXECUTE_ONLY"):
    _only = {f"{name}.md" for name in os.environ["SITE_EXECUTE_ONLY"].split(",")}
    _pages = Path(__file__).resolve().parent.glob("docs/*.md")
    nb_execution_excludepatterns = sorted(p.name for p in _pages if p.name not in _only)
    suppress_warnings = ["misc.highlighting_failure"]
# On a failing cell: report the guide and the traceback in the console, keep going, then fail
# (with -W). Raising instead hides the traceback in a temporary log file.
nb_execution_raise_on_error = False
nb_execution_show_tb = True
# Any stderr output in a cell (a DeprecationWarning, say) becomes a warning; -W makes it fatal.
nb_output_stderr = "warn"
# Merge stdout chunks so that a cell's rendered output does not depend on how it was flushed.
nb_merge_streams = True

html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {
    "show_toc_level": 2,
    "repository_url": REPOSITORY_URL,
    "repository_branch": REPOSITORY_BRANCH,
    "path_to_docs": "docs",
    "use_repository_button": True,
    "use_download_button": True,
    "launch_buttons": {"colab_url": COLAB},
}
html_static_path = ["docs/_static"]
html_css_files = ["site.css"]
# Left empty, the theme's script logs "Got invalid theme mode" as a console error.
html_context = {"default_mode": "auto"}
# Every guide is a pair: docs/NAME.md (MyST, the source you edit) and notebooks/NAME.ipynb
# (executed outputs, for Colab, GitHub and local runs). `make sync` keeps them in step.


def _point_at_the_notebook(app, pagename, templatename, context, doctree):
    """After the theme's own handler: its Colab button and .ipynb download use notebooks/.

    The theme builds the Colab link from the page's source file (docs/NAME.md), which Colab
    cannot open, and offers for download a notebook converted from the md during this build.
    Both are pointed at the committed pair, notebooks/NAME.ipynb, instead.
    """
    notebook = Path(app.confdir) / "notebooks" / f"{pagename}.ipynb"
    if not notebook.exists():
        return
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []):
            if button.get("url", "").startswith(COLAB):
                button["url"] = colab_url(pagename)
    if context.get("ipynb_source"):
        target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(notebook, target)


def setup(app):
    # The theme adds its launch and download buttons at the default priority (500).
    app.connect("html-page-context", _point_at_the_notebook, priority=900)
