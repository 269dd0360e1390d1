"""The site as a reader meets it: each built page in a real browser (Chromium, by Playwright).

The pages come from the `site` build of conftest.py, served on 127.0.0.1. Playwright cannot
download its own browser here, so the test uses the system's Chromium (`apt-get install
chromium`, or CHROMIUM=/path/to/chrome). Without one it is skipped, except under CI=true,
where that is a failure. Full-page screenshots land in _build/screenshots/ for a person to see.
"""

import functools
import http.server
import json
import os
import re
import shutil
import threading
from urllib.parse import urlparse

import nbformat
import pytest
from conftest import BUILD, DOCS, HTML, IN_CI, NOTEBOOKS, SMART_QUOTES, conf, guide_names, headings

SCREENSHOTS = BUILD / "screenshots"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Chromium as root in a container, with none of its background calls to the internet.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update",
]  # fmt: skip
# A device label inside a sharding visualization: "CPU 0,1,2,3", "TPU 4", "GPU 0,4".
DEVICE_LABEL = re.compile(r"\b(?:CPU|GPU|TPU) \d+(?:,\d+)*")


def find_chromium():
    if os.environ.get("CHROMIUM"):
        path = shutil.which(os.environ["CHROMIUM"])
        assert path, f"CHROMIUM={os.environ['CHROMIUM']} is not an executable browser"
        return path
    return next((path for n in CHROMIUM_NAMES if (path := shutil.which(n))), None)


@pytest.fixture(scope="module")
def browser():
    path = find_chromium()
    if path is None:
        message = (
            "no Chromium found, so the browser test cannot run. Install it with "
            "`apt-get install chromium` (Debian, Ubuntu), or set CHROMIUM=/path/to/chrome."
        )
        if IN_CI:
            pytest.fail(message + " Under CI=true this is a failure, not a skip.")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def base_url(browser, request):
    # Asked for only once a browser was found, so that a skip does not wait for the build.
    site = request.getfixturevalue("site")
    assert site.returncode == 0, "the build failed; see tests/site/test_build.py"
    handler = functools.partial(QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


class Visit:
    """A page opened in the browser, with every console error and off-site request recorded."""

    def __init__(self, browser, base_url, path, width=1280, height=900):
        self.page = browser.new_page(viewport={"width": width, "height": height})
        self.errors, self.offsite = [], []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        host = urlparse(base_url).netloc

        def only_this_site(route):
            if urlparse(route.request.url).netloc == host:
                route.continue_()
            else:  # the site must work offline: nothing may come from elsewhere
                self.offsite.append(route.request.url)
                route.abort()

        self.page.route("**/*", only_this_site)
        response = self.page.goto(f"{base_url}/{path}", wait_until="load")
        assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
        self.page.wait_for_load_state("networkidle")

    def check_clean(self, path):
        assert not self.errors, f"{path}: console errors: {self.errors}"
        assert not self.offsite, f"{path}: requests to other sites: {self.offsite}"


@pytest.fixture
def visit(browser, base_url):
    opened = []

    def open_page(path, **viewport):
        opened.append(Visit(browser, base_url, path, **viewport))
        return opened[-1]

    yield open_page
    for v in opened:
        v.page.close()


def notebook_outputs(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    return nb, [c for c in nb.cells if c.cell_type == "code" and c.outputs]


# In the page: each sharding visualization (a rich HTML output's <pre> naming devices; printed
# text that names a device, such as "on a GPU 3.5 GB", is not one), as its lines of text.
GRIDS_JS = """
() => [...document.querySelectorAll('div.cell_output div.text_html pre')]
  .filter(pre => /(CPU|GPU|TPU) \\d/.test(pre.innerText))
  .map(pre => ({
    lines: pre.innerText.replace(/\\n+$/, '').split('\\n'),
    visible: pre.getBoundingClientRect().height > 0,
  }))
"""

IMAGES_JS = """
() => [...document.images].map(img => ({src: img.src, ok: img.complete && img.naturalWidth > 0}))
"""


@pytest.mark.parametrize("name", guide_names())
def test_guide_page_in_a_browser(visit, base_url, name):
    v = visit(f"{name}.html")
    page = v.page
    v.check_clean(f"{name}.html")

    # The headings of its sections, as the reader sees them.
    shown = [
        re.sub(r"[#¶]\s*$", "", t).strip().translate(SMART_QUOTES)
        for t in page.locator("article h2, article h3").all_inner_texts()
    ]
    for heading in headings((DOCS / f"{name}.md").read_text()):
        assert heading in shown, f"{name}: section {heading!r} is not on the page ({shown})"

    # Every executed output is on the page, and visible.
    nb, with_output = notebook_outputs(name)
    outputs = page.locator("div.cell_output")
    assert outputs.count() == len(with_output), (
        f"{name}: {outputs.count()} outputs on the page, {len(with_output)} in the notebook"
    )
    hidden = [i for i in range(outputs.count()) if not outputs.nth(i).is_visible()]
    assert not hidden, f"{name}: outputs {hidden} are not visible"

    # Sharding visualizations: as many as the notebook has, each drawn as a table: a box of
    # equal-width rows, its cells separated by lines and labelled with their devices.
    expected = sum(
        1
        for c in with_output
        for o in c.outputs
        if DEVICE_LABEL.search(re.sub(r"<[^>]+>", "", o.get("data", {}).get("text/html", "")))
    )
    grids = page.evaluate(GRIDS_JS)
    assert len(grids) == expected, f"{name}: {len(grids)} grids rendered, {expected} expected"
    for grid in grids:
        lines = grid["lines"]
        assert grid["visible"] and len(lines) > 2, f"{name}: a grid is not drawn: {lines}"
        assert len({len(line) for line in lines}) == 1, f"{name}: a grid's rows differ in width"
        assert lines[0][0] + lines[0][-1] + lines[-1][0] + lines[-1][-1] == "┌┐└┘", (
            f"{name}: a grid has no border (use_color=False keeps it): {lines}"
        )
        labels = [m for line in lines for m in DEVICE_LABEL.findall(line)]
        assert labels, f"{name}: a grid shows no device labels"

    # Every image loaded, the notebook's plots among them.
    images = page.evaluate(IMAGES_JS)
    broken = [i["src"] for i in images if not i["ok"]]
    assert not broken, f"{name}: images that did not load: {broken}"
    plots = sum(1 for c in with_output for o in c.outputs if "image/png" in o.get("data", {}))
    shown_plots = page.locator("div.cell_output img").count()
    assert shown_plots == plots, f"{name}: {shown_plots} plots shown, {plots} in the notebook"

    # "Open in Colab", in the text and in the theme's launch menu: this page's own notebook.
    url = conf()["colab_url"](name)
    colab = page.locator('a[href^="https://colab.research.google.com/"]')
    hrefs = {colab.nth(i).get_attribute("href") for i in range(colab.count())}
    in_text = page.locator('article a[href^="https://colab.research.google.com/"]').count()
    assert in_text >= 1 and colab.count() >= 2, f"{name}: Colab link missing ({hrefs})"
    assert hrefs == {url}, f"{name}: Colab links {hrefs}, expected {url}"
    assert url.endswith(f"/notebooks/{name}.ipynb") and (NOTEBOOKS / f"{name}.ipynb").exists()

    # The .ipynb download is the committed notebook.
    download = page.locator('a[href$=".ipynb"]:not([href^="http"])')
    assert download.count() == 1, f"{name}: expected one .ipynb download link"
    href = download.get_attribute("href")
    body = page.request.get(f"{base_url}/{href}")
    assert body.ok, f"{name}: the .ipynb download {href} answers {body.status}"
    assert json.loads(body.text()) == json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


# Each output box and figure of a page, as laid out: how wide its content is, how wide the box,
# and whether the reader can scroll it sideways; the visible code cells that scroll sideways;
# then the page's own width.
LAYOUT_JS = """
() => {
  const selector = 'div.cell_output pre, div.cell_output div.text_html';
  const boxes = [...document.querySelectorAll(selector)].map(el => ({
      what: el.tagName + ' ' + (el.innerText || '').slice(0, 60).replace(/\\s+/g, ' '),
      content: el.scrollWidth, box: el.clientWidth,
      scrolls: ['auto', 'scroll'].includes(getComputedStyle(el).overflowX),
      right: el.getBoundingClientRect().right,
    }));
  const code = [...document.querySelectorAll('div.cell:not(.tag_hide-input) div.cell_input pre')]
    .filter(el => el.scrollWidth > el.clientWidth + 1)
    .map(el => (el.innerText || '').split('\\n')[0].slice(0, 60));
  const images = [...document.querySelectorAll('div.cell_output img')].map(img => ({
    right: img.getBoundingClientRect().right, width: img.getBoundingClientRect().width,
  }));
  const page = document.documentElement.scrollWidth;
  return {boxes, code, images, page, view: window.innerWidth};
}
"""
WIDTHS = {"laptop": (1366, 768), "phone": (390, 844)}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", guide_names())
def test_wide_outputs_stay_readable(visit, name, width):
    """No printed table or figure is cut at the right edge: a box wider than the text column
    scrolls sideways, a figure shrinks to fit, and the page itself never needs a sideways
    scroll, at a laptop's width and a phone's. At the laptop's, no visible code cell scrolls."""
    w, h = WIDTHS[width]
    v = visit(f"{name}.html", width=w, height=h)
    layout = v.page.evaluate(LAYOUT_JS)
    assert layout["page"] <= layout["view"], (
        f"{name} at {w}px: the page is {layout['page']}px wide, wider than the window"
    )
    for box in layout["boxes"]:
        if box["content"] > box["box"] + 1:
            assert box["scrolls"], f"{name} at {w}px: cut at the right edge: {box['what']!r}"
        assert box["right"] <= w + 1, f"{name} at {w}px: past the window: {box['what']!r}"
    for image in layout["images"]:
        assert 0 < image["width"] and image["right"] <= w + 1, f"{name} at {w}px: {image}"
    if width == "laptop":  # code formatted at 99 columns fits the text column; a phone scrolls it
        assert not layout["code"], f"{name} at {w}px: code cells scroll sideways: {layout['code']}"


# The corners of each output image as drawn (RGBA of its own pixels, read through a canvas).
CORNERS_JS = """
() => [...document.querySelectorAll('div.cell_output img')].map(img => {
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const context = canvas.getContext('2d');
  context.drawImage(img, 0, 0);
  const w = img.naturalWidth - 1, h = img.naturalHeight - 1;
  const pixel = ([x, y]) => [...context.getImageData(x, y, 1, 1).data];
  return [[0, 0], [w, 0], [0, h], [w, h]].map(pixel);
})
"""


@pytest.mark.parametrize("name", ["scale_up_a_flax_model", "choose_a_layout", "transformer"])
def test_figures_carry_their_own_white_ground_for_the_dark_theme(visit, name):
    """A figure drawn on a transparent ground would show its black text on the dark theme's dark
    page; the site's figures are opaque white to their corners, in either theme."""
    v = visit(f"{name}.html")
    v.page.evaluate("document.documentElement.dataset.theme = 'dark'")
    corners = v.page.evaluate(CORNERS_JS)
    assert len(corners) >= 2, f"{name}: expected its figures, found {len(corners)} images"
    for i, image in enumerate(corners):
        assert all(pixel == [255, 255, 255, 255] for pixel in image), f"{name} image {i}: {image}"


def test_index_page_links_every_guide(visit):
    v = visit("index.html")
    v.check_clean("index.html")
    hrefs = v.page.locator("article a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    missing = [n for n in guide_names() if f"{n}.html" not in hrefs]
    assert not missing, f"index.html does not link {missing}"


def test_site_search_finds_the_main_guide(visit):
    v = visit("search.html?q=with_partitioning")
    results = v.page.locator("#search-results ul.search li a")
    results.first.wait_for(timeout=20_000)
    found = results.evaluate_all("els => els.map(e => e.getAttribute('href'))")
    v.check_clean("search.html")
    assert any(h.startswith("scale_up_a_flax_model.html") for h in found), found
