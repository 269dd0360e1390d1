"""Write what each guide takes from REPOSITORY_URL in conf.py (run by `make sync`).

- The "Open in Colab" link: the first line starting with `[Open in Colab](` in docs/NAME.md; it
  must open notebooks/NAME.ipynb of the repository that conf.py names.
- The Colab setup cell's `"guide-helpers @ git+URL@BRANCH"`: in Colab, the guide installs this
  repository's helper package from there.

A fork changes REPOSITORY_URL once and runs `make sync`; tests/test_site.py checks that every
guide agrees.
"""

import re
import runpy
import sys
from pathlib import Path

from guides import guide_names

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"^\[Open in Colab\]\([^)]*\)", re.M)
HELPERS = re.compile(r'"guide-helpers @ git\+[^"]*"')


def main():
    conf = runpy.run_path(str(ROOT / "conf.py"))
    status = 0
    for name in guide_names(ROOT / "docs"):
        md = ROOT / "docs" / f"{name}.md"
        text = md.read_text()
        if not LINK.search(text) or not HELPERS.search(text):
            print(
                f"error: {md.relative_to(ROOT)} needs an '[Open in Colab](...)' line after its "
                'title and a Colab setup cell that installs "guide-helpers @ git+..."'
            )
            status = 1
            continue
        new = LINK.sub(lambda _: f"[Open in Colab]({conf['colab_url'](name)})", text, count=1)
        new = HELPERS.sub(lambda _: f'"{conf["helpers_requirement"]()}"', new)
        if new != text:
            md.write_text(new)
            print(f"updated the repository links in {md.relative_to(ROOT)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
