"""``stacklm html``: a Markdown table of the report as a standalone HTML page (the rule ``html``).

    stacklm html --markdown results/report/tables/T.md --title "Table 1" --out results/report/tables/T.html

``snakemake --report`` shows an HTML result in its page and offers any other file as a
download only, so each task's Markdown table (``stacklm report``) is rendered here for it.
The Markdown is parsed by markdown-it-py (CommonMark with its table extension) with raw HTML
switched off: a name taken from the config reaches the page as text, never as markup.
"""

from __future__ import annotations

import argparse
import html
from pathlib import Path

from stacklm.atomic import write_text_atomically
from stacklm.errors import located

STYLE = (
    "body{font-family:sans-serif;margin:1em}"
    "table{border-collapse:collapse;margin-bottom:1.5em}"
    "th,td{border-bottom:1px solid #ccc;padding:.2em .6em}"
    "th{border-bottom:2px solid #333}"
)


def markdown_page(markdown: str, title: str) -> str:
    """``markdown`` rendered as one HTML page titled ``title``."""
    # imported here: only this command renders Markdown
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    )


def html_command(args: argparse.Namespace) -> int:
    try:
        markdown = args.markdown.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise located(args.markdown, None, f"cannot read the Markdown table: {error}") from None
    write_text_atomically(args.out, markdown_page(markdown, args.title))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("html")
    parser.add_argument("--markdown", required=True, type=Path, help="a table written by `stacklm report --markdown`")
    parser.add_argument("--title", required=True, help="the page's title")
    parser.add_argument("--out", required=True, type=Path, help="the HTML page to write")
    parser.set_defaults(func=html_command)
