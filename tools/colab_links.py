"""Write each guide's "Open in Colab" link from REPOSITORY_URL in conf.py (run by `make sync`).

The link is the first line starting with `[Open in Colab](` in docs/NAME.md; it must open
notebooks/NAME.ipynb of the repository that conf.py names. A fork changes REPOSITORY_URL once
and runs `make sync`; tests/test_site.py checks that every guide's link agrees.
"""

import re
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"^\[Open in Colab\]\([^)]*\)", re.M)


def expected_link(name):
    conf = runpy.run_path(str(ROOT / "conf.py"))
    return f"[Open in Colab]({conf['colab_url'](name)})"


def main():
    status = 0
    for md in sorted((ROOT / "docs").glob("*.md")):
        text = md.read_text()
        if not re.search(r"^jupytext:", text, re.M):
            continue  # not a guide (the index page)
        if not LINK.search(text):
            print(
                f"error: {md.relative_to(ROOT)} has no '[Open in Colab](...)' line after its title"
            )
            status = 1
            continue
        new = LINK.sub(lambda _: expected_link(md.stem), text, count=1)
        if new != text:
            md.write_text(new)
            print(f"updated the Colab link in {md.relative_to(ROOT)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
