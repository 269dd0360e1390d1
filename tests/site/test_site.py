"""The site's own promises, checked on the sources: pairs, toctree, pins, commands, metadata."""

import ast
import glob
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import page_shape  # tools/, on sys.path via conftest
import pytest
from conftest import DOCS, NOTEBOOKS, ROOT, conf, guide_names, run
from IPython.core.inputtransformer2 import TransformerManager
from shared_cells import install_cell, pins, setup_cell  # tools/

IGNORE = "nbval-ignore-output"


def toctree_entries(md_text):
    blocks = re.findall(r"```\{toctree\}(.*?)```", md_text, re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith(":")]


def test_every_guide_is_in_the_toctree():
    entries = toctree_entries((DOCS / "index.md").read_text())
    missing = [name for name in guide_names() if name not in entries]
    assert not missing, f"guides missing from the toctree in docs/index.md: {missing}"
    unknown = [e for e in entries if not (DOCS / f"{e}.md").exists()]
    assert not unknown, f"toctree entries with no docs/*.md page: {unknown}"


@pytest.mark.parametrize("name", guide_names())
def test_notebook_is_committed_executed_and_deterministic(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    unexecuted = [i for i, c in enumerate(nb.cells) if c in code and c.execution_count is None]
    assert not unexecuted, f"{name}.ipynb has unexecuted code cells {unexecuted}: `make execute`"
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"{name}.ipynb was not executed top to bottom in one fresh kernel: {counts}"
    )
    timed = [i for i, c in enumerate(nb.cells) if "execution" in c.metadata]
    assert not timed, f"{name}.ipynb stores per-cell timing metadata in cells {timed}"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    stderr = [o for c in code for o in c.outputs if o.get("name") == "stderr"]
    assert not errors and not stderr, f"{name}.ipynb stores an error or stderr output"


@pytest.mark.parametrize("name", guide_names())
def test_ignored_outputs_are_timings_and_say_why(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    for i, cell in enumerate(nb.cells):
        if IGNORE not in cell.metadata.get("tags", []):
            continue
        # A timing: %time or %timeit, durations summed from a profiler trace (profile.timings,
        # the gaps of profile.idle), or the difference of two time.perf_counter() readings.
        timing = r"%timeit |^%time |\bprofile\.(timings|idle)\(|\btime\.perf_counter\(\)"
        assert re.search(timing, cell.source, re.M), f"{name} cell {i} ignores a non-timing output"
        assert re.search(r"^# .+", cell.source, re.M), (
            f"{name} cell {i} is tagged {IGNORE} without a comment that says why"
        )


# The first screen: the front matter, the title, the Colab link, a short intro and the two
# setup cells come first; the page's first lesson cell starts before this line of the md, with
# the collapsed install cell counted as the one line the page shows of it.
FIRST_LESSON_BY_LINE = 59


def code_cells(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    return [c for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("name", guide_names())
def test_guide_opens_with_the_shared_install_and_setup_cells(name):
    """Cell 1 installs (in Colab only), cell 2 asks for 8 devices (16 for the 8B plan) before
    anything uses jax: both as tools/shared_cells.py writes them (`make sync`)."""
    install, setup, *_ = code_cells(name)
    assert install.source == install_cell(conf()), (
        f"{name}: cell 1 is not the Colab install cell tools/shared_cells.py writes (after "
        "changing a pin or REPOSITORY_URL, run `make sync`):\n" + install.source
    )
    assert install.metadata.get("tags") == ["hide-input"], (
        f"{name}: the Colab install cell is plumbing: tag it hide-input"
    )
    assert setup.source == setup_cell(name), (
        f"{name}: cell 2 is not tools/shared_cells.py's setup_cell (run `make sync`)"
    )


@pytest.mark.parametrize("name", guide_names())
def test_the_lesson_starts_on_the_first_screen(name):
    """The first code cell after the two setup cells starts near the top of the md."""
    lines = (DOCS / f"{name}.md").read_text().splitlines()
    starts = [i + 1 for i, line in enumerate(lines) if line.startswith("```{code-cell}")]
    assert len(starts) > 3, f"{name} has too few code cells"
    # The third code cell is the first after the setup; one cell of imports only may come first.
    code = [c.source for c in code_cells(name)]
    only_imports = all(
        re.match(r"(import |from \S+ import |#|$)", line) for line in code[2].splitlines()
    )
    first_lesson = starts[3] if only_imports else starts[2]
    # The install cell is tagged hide-input: the page shows it as one collapsed line.
    first_lesson -= len(code[0].splitlines()) - 1
    assert first_lesson < FIRST_LESSON_BY_LINE, (
        f"docs/{name}.md: the first lesson cell starts at line {first_lesson}; the reader "
        f"should meet it on the first screen (before line {FIRST_LESSON_BY_LINE})"
    )


OPENING_WORDS = 120


def opening_paragraph(name):
    """The first paragraph of a guide's text: after its title and its Colab link."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    first = next(c.source for c in nb.cells if c.cell_type == "markdown")
    paragraphs = [p.strip() for p in first.split("\n\n") if p.strip()]
    return next(p for p in paragraphs if not p.startswith(("#", "[Open in Colab]")))


@pytest.mark.parametrize("name", guide_names())
def test_the_opening_paragraph_says_what_you_do_in_few_words(name):
    words = len(opening_paragraph(name).split())
    assert words <= OPENING_WORDS, (
        f"docs/{name}.md: its opening paragraph has {words} words; say what the reader will do in"
        f" at most {OPENING_WORDS}, and leave the numbers to the outputs"
    )


def test_requirements_pin_every_dependency_exactly():
    lines = [
        line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
    ]
    # This repository's own package, guide_helpers, is the one requirement without a pin.
    reqs = [line for line in lines if line and line != "-e ."]
    assert "-e ." in lines, "requirements.txt must install guide_helpers (`-e .`)"
    loose = [r for r in reqs if not re.fullmatch(r"[A-Za-z0-9_.\[\]-]+==[\w.]+", r)]
    assert not loose, f"requirements not pinned with ==: {loose}"
    names = {r.split("==")[0].lower() for r in reqs}
    needed = {
        "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "jupytext", "myst-nb", "sphinx",
        "sphinx-book-theme", "nbval", "pytest", "ipykernel",
    }  # fmt: skip
    assert needed <= names, f"not pinned: {sorted(needed - names)}"


def pip_install_in_colab(cell, monkeypatch, tmp_path, vendors):
    """Run the install cell as in a Colab runtime whose PCI devices have these vendor ids;
    return the packages it asks pip to install (pip itself is not run)."""
    for i, vendor in enumerate(vendors):
        (tmp_path / f"0000:00:0{i}.0").mkdir()
        (tmp_path / f"0000:00:0{i}.0" / "vendor").write_text(vendor + "\n")
    real_glob = glob.glob
    sysfs = "/sys/bus/pci/devices/*/vendor"
    monkeypatch.setattr(
        glob, "glob", lambda p: real_glob(str(tmp_path / "*" / "vendor")) if p == sysfs else []
    )
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append((cmd, kw)))
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    exec(compile(cell, "install_cell", "exec"), {})
    ((cmd, kwargs),) = calls
    assert cmd[:5] == [sys.executable, "-m", "pip", "install", "-q"] and kwargs["check"]
    return cmd[5:]


@pytest.mark.parametrize(
    "runtime, vendors, jax",
    [
        ("CPU", ["0x8086", "0x1af4"], "jax=="),
        ("GPU (NVIDIA T4, L4, A100)", ["0x8086", "0x10de"], "jax[cuda12]=="),
        ("TPU (v5e-1, v6e-1, v5e-8)", ["0x8086", "0x1ae0", "0x1ae0"], "jax[tpu]=="),
    ],
)
def test_the_install_cell_keeps_the_runtimes_accelerator(
    runtime, vendors, jax, monkeypatch, tmp_path
):
    """On a Colab GPU or TPU runtime, JAX is installed with the extra for its accelerator (at
    the pinned version), so the runtime's accelerator build is not replaced by a CPU one."""
    pinned = pins()
    packages = pip_install_in_colab(install_cell(conf()), monkeypatch, tmp_path, vendors)
    assert packages[0] == jax + pinned["jax"], (runtime, packages)
    assert f"jaxlib=={pinned['jaxlib']}" in packages and f"flax=={pinned['flax']}" in packages
    assert packages[-1] == conf()["helpers_requirement"](), packages


def test_the_install_cell_does_nothing_outside_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("pip ran outside Colab"))
    exec(compile(install_cell(conf()), "install_cell", "exec"), {})


def test_readme_commands_exist_in_the_makefile():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    used = set(re.findall(r"\bmake ([a-z][\w-]*)", readme))
    assert {"html", "test"} <= used, "the README must give `make html` and `make test`"
    assert used <= targets, f"README names make targets the Makefile lacks: {used - targets}"
    first_commands = re.findall(r"\bmake ([a-z][\w-]*)", readme)[:2]
    assert first_commands == ["html", "test"], "the README must say these two commands first"


def test_ci_and_read_the_docs_build_the_same_way():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci and "make portability" in ci
    rtd = (ROOT / ".readthedocs.yaml").read_text()
    assert re.search(r"^version: 2$", rtd, re.M)
    assert "-c ." in rtd and "-W" in rtd and "--keep-going" in rtd
    assert "nb_execution_mode=force" in rtd
    assert "requirements.txt" in rtd
    # Read the Docs builds the site with the Python that `make portability` proves (Colab's).
    proved = re.search(r"^COLAB_PYTHON := ([\d.]+)$", (ROOT / "Makefile").read_text(), re.M)[1]
    assert re.search(rf'^\s+python: "{re.escape(proved)}"', rtd, re.M), (proved, rtd)


def test_no_page_names_a_runtime_that_no_longer_exists():
    """Colab retired its TPU v2-8 in September 2025 (colabtools#5566): no advice may name it."""
    texts = [ROOT / "README.md", *DOCS.glob("*.md"), *(ROOT / "guide_helpers").glob("*.py")]
    stale = [p.relative_to(ROOT) for p in texts if re.search(r"v2-8|v2_8", p.read_text())]
    assert not stale, f"these name Colab's retired TPU v2-8: {stale}"


def test_pre_commit_hooks_use_the_pinned_versions():
    pinned = pins()
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    revs = dict(re.findall(r"repo: https://github\.com/[\w-]+/([\w-]+)\s+rev: v([\w.]+)", config))
    assert revs.get("jupytext") == pinned["jupytext"], f"hooks {revs}, pin {pinned['jupytext']}"
    assert revs.get("ruff-pre-commit") == pinned["ruff"], f"ruff hook {revs}, pin {pinned['ruff']}"
    assert re.search(r"id: jupytext\s+args: \[--sync\]", config), "the jupytext hook must --sync"
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: lint\b", makefile, re.M), "`make test` must run `make lint` first"


def test_scripts_that_guides_write_pass_ruff(tmp_path):
    """Ruff skips cells that start with a cell magic, so the scripts a guide writes to files
    (`%%writefile NAME`, or `%%to_workdir NAME` and its `--append` parts) are checked here."""
    scripts = []
    for name in guide_names():
        (tmp_path / name).mkdir()
        for cell in code_cells(name):
            match = re.match(r"%%(?:writefile|to_workdir) +(\S+\.py)( --append)?\n", cell.source)
            if match:  # written as guide_helpers.workdir writes it, in parts or whole
                path = tmp_path / name / Path(match[1]).name
                part = cell.source[match.end() :] + "\n"
                if match[2]:
                    part = path.read_text().rstrip("\n") + "\n\n\n" + part
                else:
                    scripts.append(path)
                path.write_text(part)
    # The scripts import one another: tell isort they are this project's own modules.
    first_party = "lint.isort.known-first-party = " + json.dumps([p.stem for p in scripts])
    config = ["--config", str(ROOT / "ruff.toml"), "--config", first_party]
    ruff = str(Path(sys.executable).parent / "ruff")
    for args in (["check"], ["format", "--check"]):
        result = run([ruff, *args, *config, *map(str, scripts)], 120, cwd=tmp_path)
        assert result.returncode == 0, f"ruff {args[0]} on the guides' scripts:\n{result.stdout}"


# A visible cell states its section's claim in at most this many asserts; the exact bookkeeping
# goes into a collapsed check cell right after it (tools/page_shape.py says which is which).
VISIBLE_ASSERTS = 2


@pytest.mark.parametrize("name", guide_names())
def test_a_visible_cell_states_its_claim_and_the_checks_are_one_click_away(name):
    shown = page_shape.cells(name)
    empty = [c for c in shown if not c.source.strip()]
    assert not empty, f"docs/{name}.md has an empty code cell: remove it"
    crowded = [
        c.source.splitlines()[0] for c in shown if not c.hidden and c.asserts > VISIBLE_ASSERTS
    ]
    assert not crowded, (
        f"docs/{name}.md: visible cells with more than {VISIBLE_ASSERTS} asserts (move the "
        f"bookkeeping into a collapsed check cell after it, first line '# Check: ...'): {crowded}"
    )
    unsaid = [c.source.splitlines()[0] for c in shown if c.hidden and c.asserts]
    unsaid = [line for line in unsaid if not line.startswith("# ")]
    assert not unsaid, (
        f"docs/{name}.md: collapsed cells that check without a first line that says what they"
        f" check or do ('# Check: ...'): {unsaid}"
    )
    cells = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells
    after = [  # (the cell before, a check cell), in the page's order, prose included
        (before, page_shape.Cell(cell.source, True))
        for before, cell in zip(cells, cells[1:])
        if "hide-input" in cell.metadata.get("tags", [])
    ]
    stray = [
        check.source.splitlines()[0]
        for before, check in after
        if check.is_check
        and (before.cell_type != "code" or "hide-input" in before.metadata.get("tags", []))
    ]
    assert not stray, (
        f"docs/{name}.md: check cells that do not follow the visible code cell they check"
        f" (put each right after its cell, no prose between): {stray}"
    )


def names_of(tree, bound):
    """(names the cell loads that neither it nor an earlier cell binds, names bound so far).
    Parameters, what a function assigns and a comprehension's variables are local: neither
    loaded from nor bound in the module."""
    local = {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.Lambda)):
            stored = (n for n in ast.walk(f) if isinstance(n, ast.Name))
            local |= {n.id for n in stored if isinstance(n.ctx, ast.Store)}
    inner = set()  # the Name nodes of comprehension targets
    for comp in ast.walk(tree):
        if isinstance(comp, ast.comprehension):
            inner |= {id(n) for n in ast.walk(comp.target)}
            local |= {n.id for n in ast.walk(comp.target) if isinstance(n, ast.Name)}
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - local
    mine = set()
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.ClassDef)):
            mine.add(top.name)
            continue
        for node in ast.walk(top):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mine |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                if id(node) not in inner:
                    mine.add(node.id)
    return loaded - bound - mine, bound | mine


@pytest.mark.parametrize("name", guide_names())
def test_no_later_cell_uses_a_name_the_install_cell_left(name):
    """The install cell's imports and variables (sys, subprocess, Path, ...) exist only because
    of how it installs; a later cell that uses one without binding it breaks with the cell."""
    transform = TransformerManager().transform_cell
    install, *rest = code_cells(name)
    _, left = names_of(ast.parse(install.source), set())
    bound, used = set(), []
    for cell in rest:
        if cell.source.startswith("%%"):  # a script written to disk, not run in the kernel
            continue
        free, bound = names_of(ast.parse(transform(cell.source)), bound)
        used += sorted(free & left)
    assert not used, f"docs/{name}.md uses, without importing or binding, {used} (install cell)"


@pytest.mark.parametrize("name", guide_names())
def test_every_page_ends_the_same_way(name):
    """What you saw, the exercises where there are any, where next: the last sections."""
    text = re.sub(r"```.*?```", "", (DOCS / f"{name}.md").read_text(), flags=re.S)
    sections = re.findall(r"^## (.+)$", text, re.M)
    ending = sections[-3:] if "Exercises" in sections[-3:] else sections[-2:]
    assert ending in (
        ["What you saw", "Where next"],
        ["What you saw", "Exercises", "Where next"],
    ), (
        f"docs/{name}.md ends with {sections[-3:]}: end with 'What you saw', then 'Exercises'"
        " where there are any, then 'Where next'"
    )


# The longest lesson cell, every line counted: a script longer than that is written in parts
# (`%%to_workdir NAME --append`), each explained in turn.
LONGEST_CELL = 40


# Over all guides: the median lesson cell, every line counted, and the share of the lesson lines
# that check (asserts, `if ON_CPU:` blocks); JAX's and Flax's sharding pages: 5 to 8.5, 0 to 3%.
MEDIAN_CELL, CHECK_SHARE = 9, 0.04


def test_the_lesson_reads_like_jax_own_pages():
    shape = page_shape.summary(guide_names())
    assert shape["median"] <= MEDIAN_CELL, (
        f"the median lesson cell has {shape['median']} lines, over {MEDIAN_CELL}: split cells"
        " into one idea each (`python3 tools/page_shape.py` shows each page)"
    )
    assert shape["check share"] <= CHECK_SHARE, (
        f"{shape['check share']:.1%} of the lesson lines check, over {CHECK_SHARE:.0%}: move the"
        " bookkeeping into collapsed check cells (`python3 tools/page_shape.py`)"
    )


def test_no_lesson_cell_is_longer_than_a_screen():
    long = {
        name: [c.lines for c in page_shape.lesson_cells(name) if c.lines > LONGEST_CELL]
        for name in guide_names()
    }
    long = {name: sizes for name, sizes in long.items() if sizes}
    assert not long, f"lesson cells over {LONGEST_CELL} lines (split them): {long}"


@pytest.mark.parametrize("name", guide_names())
def test_code_lines_fit_the_text_column(name):
    """At 1366 px a code cell shows 99 columns (the browser test reads the built page). ruff's
    line-length check lets a longer line pass when it ends in a pragma (`# noqa`, `# fmt:
    skip`), so this checks every line of every code cell, before any build."""
    lines = [line for cell in code_cells(name) for line in cell.source.splitlines()]
    long = [line for line in lines if len(line) > 99]
    assert not long, f"docs/{name}.md: code lines over 99 columns: {long}"
