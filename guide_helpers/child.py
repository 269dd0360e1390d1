"""A Python child process whose errors and warnings read the same on every Python and terminal.

A Jupyter kernel sets `FORCE_COLOR=1`, a child process inherits it, and from Python 3.13 on the
child then colours its tracebacks (`\\x1b[1;35mValueError\\x1b[0m: ...`); Python 3.13 also prints
the offending source line under a warning, so a warning is no longer stderr's last line. A page
that reads a child's error from its text must not depend on either.

- `environ(extra)`: this process's environment for a child, with colour off (`PYTHON_COLORS=0`,
  `NO_COLOR=1`, no `FORCE_COLOR`), plus `extra`.
- `run_python(*args)`: `python *args` in such an environment, output captured, bounded in time.
- `plain(line)`: a line of a child's stderr without colour codes or glog's prefix (the time,
  thread and source file that XLA's C++ logging puts first).
- `raised(lines)`: the exceptions a child reported, as (name, message), from the last line of
  each traceback; colour and log prefixes removed first.
- `warnings_of(code)`: the warnings that running `code` in a fresh Python raised, as (category,
  message), recorded by the child itself with `warnings.catch_warnings`, never parsed from text.
"""

import json
import os
import re
import subprocess
import sys

PLAIN = {"PYTHON_COLORS": "0", "NO_COLOR": "1"}  # Python 3.13's switches, and the common one
FORCING = ("FORCE_COLOR",)  # set by ipykernel; it would turn colour back on
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
GLOG = re.compile(r"^[EWIF]\d{4} [\d:.]+ +\d+ \S+\] ")
# The last line of a traceback: an exception's (dotted) name, a colon, the message.
RAISED = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt)): (.*)$"
)
# What warnings_of runs in the child: the code, every warning recorded, then one marked line.
MARK = "warnings recorded: "
RECORDER = f"""
import json, sys, warnings
import jax  # before recording: on a TPU host, JAX's import warns of the host, not of the code
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    exec(compile(sys.argv[1], "<code>", "exec"), {{"__name__": "__main__"}})
pairs = [[w.category.__name__, str(w.message)] for w in seen]
print({MARK!r} + json.dumps(pairs))
"""


def environ(extra=None):
    """This process's environment for a child: colour off, then `extra` on top."""
    kept = {name: value for name, value in os.environ.items() if name not in FORCING}
    # A child runs where its parent does: a setup cell that fell back to CPU devices (a one-chip
    # TPU host) set jax_platforms, and the chip's lock would refuse the child anyway.
    jax = sys.modules.get("jax")
    chosen = jax.config.jax_platforms if jax and hasattr(jax, "config") else None
    platforms = {"JAX_PLATFORMS": chosen} if chosen else {}
    return {**kept, **PLAIN, **platforms, **(extra or {})}


def run_python(*args, timeout=120, env=None, cwd=None):
    """`python *args` (this Python) with colour off: a CompletedProcess with text output."""
    command = [sys.executable, *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=environ(env), cwd=cwd
    )


def plain(line):
    """The line without terminal colour codes and without glog's prefix."""
    return GLOG.sub("", ANSI.sub("", line))


def raised(lines):
    """[(exception name, message)] for each traceback's last line among `lines` (or a text)."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    found = (RAISED.match(plain(line)) for line in lines)
    return [(match[1], match[2]) for match in found if match]


def warnings_of(code, timeout=120, env=None):
    """[(category, message)] of every warning that running `code` in a fresh Python raised.

    Raises RuntimeError with the child's stderr if the code fails."""
    child = run_python("-c", RECORDER, code, timeout=timeout, env=env)
    marked = [line for line in child.stdout.splitlines() if line.startswith(MARK)]
    if child.returncode != 0 or not marked:
        raise RuntimeError(f"the code failed in a fresh Python:\n{child.stderr[-3000:]}")
    return [tuple(pair) for pair in json.loads(marked[-1][len(MARK) :])]
