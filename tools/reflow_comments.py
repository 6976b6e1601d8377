#!/usr/bin/env python3
"""One column width for code and comments: the prose of every full-line comment in our C and C++
files fills lines up to clang-format's ColumnLimit (100), as the code does.

A comment block is a run of full-line `//` comments at one indentation, or a `/* ... */` block
whose lines continue with ` * `. Its prose paragraphs (lines of text, and list items starting
"- ", "* " or "1. " with their continuation lines indented under the text) are filled to the
width; everything else is kept as written: blank comment lines, lines indented deeper than the
paragraph (code, tables, examples), lines with a run of two spaces (columns), lines that end
like code ({ } \\), and lines with NOLINT or clang-format directives.

Usage: reflow_comments.py (--check | --fix) FILE...
  --check: print each file whose comments would change and exit 1 if there is one
  --fix: rewrite those files
"""

import re
import sys
import textwrap

WIDTH = 100
LIST_ITEM = re.compile(r"^([-*]|\d+[.)]) ")
SLASH_LINE = re.compile(r"^(\s*)// ?(.*)$")


def is_structured(text):
    """True for a line that is kept as written, never joined or filled."""
    stripped = text.rstrip()
    return (
        text.startswith(" ")
        or "  " in stripped
        or stripped.endswith(("{", "}", "\\"))
        or "NOLINT" in text
        or "clang-format" in text
        or stripped.startswith(("|", "+-", "#"))
        or re.match(r"^[-=*_~/]{3,}", stripped) is not None
    )


def fill(lines, first_prefix, prefix):
    """The comment text `lines` refilled: paragraphs and list items filled, the rest kept."""
    out: list = []
    paragraph: list = []  # the text of the lines of the paragraph being gathered
    item_indent = 0  # continuation indent of the list item being gathered

    def flush():
        nonlocal paragraph, item_indent
        if not paragraph:
            return
        words = ""
        for line in paragraph:  # a line broken after "(" joins the next without a space
            words += ("" if not words or words.endswith("(") else " ") + line.strip()
        head = first_prefix if not out else prefix
        wrapped = textwrap.wrap(
            words,
            width=WIDTH,
            initial_indent=head,
            subsequent_indent=prefix + " " * item_indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        out.extend(wrapped)
        paragraph, item_indent = [], 0

    for text in lines:
        item = LIST_ITEM.match(text)
        continues_item = (
            paragraph
            and item_indent > 0
            and text.startswith(" " * item_indent)
            and not text[item_indent:].startswith(" ")
            and not is_structured(text[item_indent:])
        )
        if continues_item:
            paragraph.append(text[item_indent:])
        elif not text.strip():
            flush()
            out.append((first_prefix if not out else prefix).rstrip())
        elif item:
            flush()
            paragraph, item_indent = [text], len(item.group(0))
        elif is_structured(text):
            flush()
            out.append((first_prefix if not out else prefix) + text)
        elif paragraph and item_indent == 0:
            paragraph.append(text)
        else:
            flush()
            paragraph = [text]
    flush()
    return out


def reflow(source):
    lines = source.split("\n")
    out: list = []
    i = 0
    while i < len(lines):
        line = lines[i]
        match = SLASH_LINE.match(line)
        if match and line.lstrip().startswith("//") and not line.lstrip().startswith("///"):
            indent = match.group(1)
            block = []
            while i < len(lines):
                m = SLASH_LINE.match(lines[i])
                if not m or m.group(1) != indent or not lines[i].lstrip().startswith("//"):
                    break
                block.append(m.group(2))
                i += 1
            out.extend(fill(block, indent + "// ", indent + "// "))
            continue
        stripped = line.lstrip()
        if stripped.startswith("/* ") and "*/" not in stripped:
            indent = line[: len(line) - len(stripped)]
            block, j = [stripped[3:]], i + 1
            closed = False
            while j < len(lines):
                rest = lines[j]
                if not rest.startswith(indent + " *"):
                    break
                text = rest[len(indent) + 2 :]
                text = text[1:] if text.startswith(" ") else text
                j += 1
                if text.rstrip().endswith("*/"):
                    text = text.rstrip()[:-2].rstrip()
                    if text:
                        block.append(text)
                    closed = True
                    break
                block.append(text)
            if closed:
                filled = fill(block, indent + "/* ", indent + " * ")
                last = filled[-1]
                if len(last) + 3 <= WIDTH and last.strip() not in ("*", "/*"):
                    filled[-1] = last + " */"
                else:
                    filled.append(indent + " */")
                out.extend(filled)
                i = j
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def main(argv):
    if len(argv) < 2 or argv[1] not in ("--check", "--fix"):
        print(__doc__, file=sys.stderr)
        return 2
    changed = []
    for path in argv[2:]:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        result = reflow(source)
        if result != source:
            changed.append(path)
            if argv[1] == "--fix":
                with open(path, "w", encoding="utf-8") as f:
                    f.write(result)
    if argv[1] == "--check" and changed:
        for path in changed:
            print(f"{path}: comments not filled to {WIDTH} columns", file=sys.stderr)
        print("tools/reflow_comments.py --fix FILE... fills them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
