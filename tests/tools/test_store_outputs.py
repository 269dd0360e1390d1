"""tools/store_outputs.py: the stored notebooks take their outputs from the build's own execution.

A real build of a throwaway one-guide site fills a jupyter-cache; the tool copies its outputs
into a stale stored notebook, keeps what is not an output, and writes nothing when a guide is
missing from the cache or its code differs.
"""

import sys

import jupytext
import nbformat
from conftest import ROOT, run, sphinx_command
from support.sites import HEADER, write_site

sys.path.insert(0, str(ROOT / "tools"))
import store_outputs  # noqa: E402

CODE = "print(6 * 7)"


def built(tmp_path):
    write_site(tmp_path / "docs", {"guide": CODE})
    cache = tmp_path / "executed"
    result = run(sphinx_command(tmp_path / "docs", tmp_path / "html", tmp_path / "dt", cache), 600)
    assert result.returncode == 0, result.stdout[-3000:]
    return cache


def stored(tmp_path, code=CODE):
    page = HEADER + f"# guide\n\n```{{code-cell}} ipython3\n{code}\n```\n"
    notebook = jupytext.reads(page, "md")
    notebook.cells[1].outputs = [nbformat.v4.new_output("stream", text="stale\n")]
    notebook.cells[1].metadata["tags"] = ["hide-input"]
    (tmp_path / "notebooks").mkdir(exist_ok=True)
    path = tmp_path / "notebooks" / "guide.ipynb"
    nbformat.write(notebook, path)
    return path


def test_outputs_come_from_the_build_and_nothing_else_changes(tmp_path, capsys):
    cache, path = built(tmp_path), stored(tmp_path)
    args = ["--cache", str(cache), "--notebooks", str(tmp_path / "notebooks"), "guide"]
    assert store_outputs.main(args) == 0
    cell = nbformat.read(path, as_version=4).cells[1]
    assert [o.text for o in cell.outputs] == ["42\n"] and cell.execution_count == 1
    assert cell.metadata["tags"] == ["hide-input"]
    assert "stored the outputs of 1 guides" in capsys.readouterr().out


def test_a_missing_guide_or_other_code_writes_nothing(tmp_path, capsys):
    cache, path = built(tmp_path), stored(tmp_path, code="print(6 * 8)")
    before = path.read_text()
    notebooks = ["--notebooks", str(tmp_path / "notebooks")]
    assert store_outputs.main(["--cache", str(cache), *notebooks, "guide"]) == 1
    assert "run `make sync` first" in capsys.readouterr().err and path.read_text() == before
    assert store_outputs.main(["--cache", str(cache), *notebooks, "guide", "other"]) == 1
    assert "no execution of other" in capsys.readouterr().err and path.read_text() == before


def test_a_runs_stream_messages_are_stored_as_the_reader_sees_them():
    def out(name, text):
        return nbformat.v4.new_output("stream", name=name, text=text)

    result = nbformat.v4.new_output("execute_result", data={"text/plain": "1"})
    outputs = [out("stdout", "a\n"), out("stdout", "b\n"), out("stderr", "c\n"), result]
    merged = store_outputs.merged_streams(outputs + [out("stdout", "d\n")])
    assert [(o.get("name"), o.get("text")) for o in merged] == [
        ("stdout", "a\nb\n"), ("stderr", "c\n"), (None, None), ("stdout", "d\n")
    ]  # fmt: skip
