"""One source per model and helper: the pages that teach a model define what guide_helpers
shares, and no page redefines a helper.
"""

import ast

import jupytext
import pytest
from conftest import DOCS, ROOT, guide_names


def python_of(notebook):
    """The notebook's code cells as one Python source, IPython magics turned into calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    return "\n".join(transform(c.source) for c in notebook.cells if c.cell_type == "code")


def test_the_main_guide_defines_the_model_that_guide_helpers_shares():
    """The main guide writes the model as its lesson; other pages import guide_helpers.models.
    Both must stay the same, class by class."""

    def classes(source):
        return {
            node.name: ast.dump(node)
            for node in ast.parse(source).body
            if isinstance(node, ast.ClassDef)
        }

    shared = classes((ROOT / "guide_helpers" / "models.py").read_text())
    guide = jupytext.read(DOCS / "scale_up_a_flax_model.md")
    in_guide = classes(python_of(guide))
    for name, dump in shared.items():
        assert in_guide.get(name) == dump, (
            f"class {name} of docs/scale_up_a_flax_model.md differs from guide_helpers/models.py"
        )


def test_the_main_guide_writes_the_step_that_guide_helpers_shares():
    """The main guide writes its state, loss and step as its lesson; other pages build theirs with
    guide_helpers.training.steps_for(model), whose three functions must be the guide's."""
    shared = ast.parse((ROOT / "guide_helpers" / "training.py").read_text())
    (steps_for,) = [n for n in shared.body if getattr(n, "name", None) == "steps_for"]
    inner = {n.name: ast.dump(n) for n in steps_for.body if isinstance(n, ast.FunctionDef)}
    in_guide = top_level(python_of(jupytext.read(DOCS / "scale_up_a_flax_model.md")))
    assert set(inner) == {"make_state", "loss_fn", "train_step"}
    for name, dump in inner.items():
        assert in_guide.get(name) == dump, (
            f"{name} of docs/scale_up_a_flax_model.md differs from training.steps_for's"
        )


MAIN_STEP = {"make_state", "loss_fn", "train_step"}  # the main guide's: training.steps_for's
NNX_STEP = {"loss_fn", "train_step_in_place"}  # the NNX guide's, which training.py shares


def test_the_nnx_guide_writes_the_step_that_guide_helpers_shares():
    shared = top_level((ROOT / "guide_helpers" / "training.py").read_text())
    in_guide = top_level(python_of(jupytext.read(DOCS / "nnx_sharding.md")))
    for name in NNX_STEP:
        assert in_guide.get(name) == shared[name], (
            f"{name} of docs/nnx_sharding.md differs from guide_helpers/training.py's"
        )


def written_steps(name):
    """The train steps a guide writes itself: its functions named `train_step`, in its cells
    and in the scripts it writes to disk (`%%to_workdir`: the cell's body is the script)."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    sources = []
    for cell in jupytext.read(DOCS / f"{name}.md").cells:
        magic, _, body = cell.source.partition("\n")
        if cell.cell_type != "code":
            continue
        if magic.startswith("%%to_workdir") and magic.split()[1].endswith(".py"):
            sources.append(body)  # a Python script the page writes
        elif not cell.source.startswith("%%"):
            sources.append(transform(cell.source))
    return [
        node.name
        for source in sources
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "train_step"
    ]


# Where the step is the lesson: the main guide, and the transformer guide for the second model.
WRITE_THEIR_STEP = {"scale_up_a_flax_model", "transformer"}


def test_only_the_guides_that_teach_the_step_write_one():
    """Every other page builds the main guide's step with guide_helpers.training, or imports
    the transformer's from guide_helpers.transformer."""
    writing = {name for name in guide_names() if written_steps(name)}
    assert writing == WRITE_THEIR_STEP, (
        f"{sorted(writing - WRITE_THEIR_STEP)} write a train_step: use guide_helpers.training "
        "or guide_helpers.transformer"
    )


def top_level(source, kinds=(ast.ClassDef, ast.FunctionDef)):
    """{name: its AST dump} of the module's top-level classes and functions."""
    body = ast.parse(source).body
    return {node.name: ast.dump(node) for node in body if isinstance(node, kinds)}


# The transformer guide writes the site's second model out; guide_helpers/transformer.py shares it.
TRANSFORMER_LESSON = set(top_level((ROOT / "guide_helpers" / "transformer.py").read_text()))


def test_the_transformer_guide_defines_the_model_that_guide_helpers_shares():
    shared_source = (ROOT / "guide_helpers" / "transformer.py").read_text()
    guide_source = python_of(jupytext.read(DOCS / "transformer.md"))
    shared, in_guide = top_level(shared_source), top_level(guide_source)
    assert {"Transformer", "DecoderBlock", "CausalSelfAttention", "next_token_loss"} <= set(shared)
    for name, dump in shared.items():
        assert in_guide.get(name) == dump, (
            f"{name} of docs/transformer.md differs from guide_helpers/transformer.py"
        )
    names = [n for n in ast.parse(shared_source).body if isinstance(n, ast.Assign)]
    assert all(ast.dump(n) in map(ast.dump, ast.parse(guide_source).body) for n in names)


def definitions(source):
    """{name: what it is} for the top-level functions and classes of a source; a class is
    known by its bases too, so an NNX twin of a linen class (other bases) is another thing."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = "function"
        elif isinstance(node, ast.ClassDef):
            found[node.name] = "class(" + ", ".join(map(ast.unparse, node.bases)) + ")"
    return found


def shared_definitions():
    """Every function and class that guide_helpers defines."""
    found = {}
    for module in (ROOT / "guide_helpers").glob("*.py"):
        found.update(definitions(module.read_text()))
    return found


@pytest.mark.parametrize("name", guide_names())
def test_no_guide_redefines_what_guide_helpers_provides(name):
    """One source per helper: a guide imports it. Only the main guide and the transformer guide
    write their models, their lessons (checked equal to guide_helpers above)."""
    lessons = {
        "scale_up_a_flax_model": {"DotReluDot", "MLP", "LogicalDotReluDot", "LogicalMLP"}
        | MAIN_STEP,
        "transformer": TRANSFORMER_LESSON,
        "nnx_sharding": NNX_STEP,
    }
    allowed = lessons.get(name, set())
    shared = shared_definitions()
    in_guide = definitions(python_of(jupytext.read(DOCS / f"{name}.md")))
    copied = sorted(
        n for n, kind in in_guide.items() if shared.get(n) == kind and n not in allowed
    )
    assert not copied, f"docs/{name}.md defines {copied} again: import it from guide_helpers"


def test_the_redefinition_check_tells_a_copy_from_a_twin():
    copy = "class MLP(nn.Module):\n    pass\ndef collectives(c):\n    pass\n"
    twin = "class MLP(nnx.Module):\n    pass\n"
    shared = shared_definitions()
    assert {n for n, k in definitions(copy).items() if shared.get(n) == k} == {
        "MLP", "collectives",
    }  # fmt: skip
    assert not {n for n, k in definitions(twin).items() if shared.get(n) == k}


# The two models that pages write out as their lesson are held equal to them above instead.
TESTED_BY_THEIR_PAGES = {"models", "transformer"}


def test_the_unit_tests_mirror_the_package_and_no_test_imports_another():
    modules = {p.stem for p in (ROOT / "guide_helpers").glob("*.py")} - {"__init__"}
    tested = {p.stem.removeprefix("test_") for p in (ROOT / "tests" / "unit").glob("test_*.py")}
    assert tested == modules - TESTED_BY_THEIR_PAGES, (
        f"untested modules: {modules - TESTED_BY_THEIR_PAGES - tested}; "
        f"unit tests of no module: {tested - modules}"
    )
    test_modules = {p.stem for p in (ROOT / "tests").rglob("test_*.py")}
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                else:
                    names = [a.name for a in node.names]
                tests = {n.split(".")[-1] for n in names} & test_modules
                assert not tests, f"{path.name} imports the test module {tests}: use support/"


def test_the_guard_the_page_writes_is_the_one_ci_runs():
    """when_sharding_breaks writes the layout guard in four cells, for readers to copy; CI runs
    the repository's copy on the site's models. They must be one file."""
    cells = [c.source for c in jupytext.read(DOCS / "when_sharding_breaks.md").cells
             if c.source.startswith("%%to_workdir test_layout_guard.py")]  # fmt: skip
    written = "\n\n\n".join(c.split("\n", 1)[1].rstrip("\n") for c in cells) + "\n"
    assert len(cells) == 4
    assert written == (ROOT / "tests" / "layout_guard" / "test_layout_guard.py").read_text()
