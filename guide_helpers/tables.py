"""Tables and numbers as the pages print them."""

import html


def mib(n):
    """Bytes as MiB with two decimals: "1.25 MiB"."""
    return f"{n / 2**20:.2f} MiB"


def _row(tag, cells):
    # The first cell (a name) left-aligned, the numbers after it right-aligned.
    styles = [""] + [' style="text-align: right"'] * (len(cells) - 1)
    body = "".join(f"<{tag}{s}>{html.escape(str(c))}</{tag}>" for s, c in zip(styles, cells))
    return f"<tr>{body}</tr>"


def html_table(head, rows):
    """An HTML table (for IPython.display.display) from a header and rows of cells."""
    from IPython.display import HTML

    body = "".join(_row("td", cells) for cells in rows)
    return HTML(f"<table>{_row('th', head)}{body}</table>")
