"""Tables and numbers as the pages print them."""

import html


def mib(n):
    """Bytes as MiB with two decimals: "1.25 MiB"."""
    return f"{n / 2**20:.2f} MiB"


def _row(tag, cells, align):
    styles = ["" if a == "left" else f' style="text-align: {a}"' for a in align]
    body = "".join(f"<{tag}{s}>{html.escape(str(c))}</{tag}>" for s, c in zip(styles, cells))
    return f"<tr>{body}</tr>"


def html_table(head, rows, align=None):
    """An HTML table (for IPython.display.display) from a header and rows of cells.

    `align` gives each column "left" or "right"; by default the first column (a name) is
    left-aligned and the rest (numbers) right-aligned.
    """
    from IPython.display import HTML

    align = align or ["left"] + ["right"] * (len(head) - 1)
    if len(align) != len(head) or set(align) - {"left", "right"}:
        raise ValueError(f"align needs 'left' or 'right' for each of {len(head)} columns")
    body = "".join(_row("td", cells, align) for cells in rows)
    return HTML(f"<table>{_row('th', head, align)}{body}</table>")
