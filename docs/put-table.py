"""Puts a Markdown table between a page's markers, replacing what was there:

    <!-- NAME table -->
    ... the table ...
    <!-- end of NAME table -->

    python docs/put-table.py TABLE.md NAME PAGE.md [--if-present]

A page without the markers is refused, naming the missing line; with --if-present it is left as it is.
"""

import argparse
import sys
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("table", type=Path)
parser.add_argument("name")
parser.add_argument("page", type=Path)
parser.add_argument("--if-present", action="store_true", help="leave a page without the markers as it is")
args = parser.parse_args()
start, end = f"<!-- {args.name} table -->\n", f"<!-- end of {args.name} table -->"
text = args.page.read_text()
if start not in text or end not in text:
    if args.if_present:
        sys.exit(0)
    sys.exit(f"{args.page}: no '{start.strip()}' line followed by '{end}' to put the table between")
head, rest = text.split(start, 1)
args.page.write_text(head + start + args.table.read_text() + end + rest.split(end, 1)[1])
