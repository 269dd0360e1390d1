"""Write each guide's "Open in Colab" link from REPOSITORY_URL in conf.py (run by `make sync`).

The link is the first line starting with `[Open in Colab](` in docs/NAME.md; it must open
notebooks/NAME.ipynb of the repository that conf.py names. A fork changes REPOSITORY_URL once
and runs `make sync`; tests/test_site.py checks that every guide's link agrees.
"""

import re
import runpy
import sys
from pathlib import Path

from guides import guide_names

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"^\[Open in Colab\]\([^)]*\)", re.M)


def main():
    colab_url = runpy.run_path(str(ROOT / "conf.py"))["colab_url"]
    status = 0
    for name in guide_names(ROOT / "docs"):
        md = ROOT / "docs" / f"{name}.md"
        text = md.read_text()
        if not LINK.search(text):
            print(
                f"error: {md.relative_to(ROOT)} has no '[Open in Colab](...)' line after its title"
            )
            status = 1
            continue
        new = LINK.sub(lambda _: f"[Open in Colab]({colab_url(name)})", text, count=1)
        if new != text:
            md.write_text(new)
            print(f"updated the Colab link in {md.relative_to(ROOT)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
