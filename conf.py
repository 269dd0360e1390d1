"""Sphinx configuration for the site. The sources are in docs/; this file sits at the root.

Build with `make html`; CI and Read the Docs build with `nb_execution_mode=force`, so every guide
is executed on every build and any failing cell, warning or stderr output fails the build.
"""

project = "Flax sharding, executed"
author = "The project's contributors"
copyright = "2026, the project's contributors"

extensions = ["myst_nb"]

root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]

# MyST: ::: fences for admonitions, and heading anchors for #links within a page.
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

# Notebook execution. `cache` (jupyter-cache) re-executes a guide only when its code changes:
# right for local edits. CI and Read the Docs pass `-D nb_execution_mode=force`.
nb_execution_mode = "cache"
nb_execution_timeout = 600
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
}
