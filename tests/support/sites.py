"""Throwaway sites of tiny guides, for the tests that prove the build's gates."""

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


def write_site(src, pages):
    src.mkdir()
    toctree = "\n".join(pages)
    (src / "index.md").write_text(f"# Index\n\n```{{toctree}}\n{toctree}\n```\n")
    for name, code in pages.items():
        body = f"# {name}\n\n```{{code-cell}} ipython3\n{code}\n```\n"
        (src / f"{name}.md").write_text(HEADER + body)
