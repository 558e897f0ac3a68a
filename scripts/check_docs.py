#!/usr/bin/env python3
"""Checks that the documentation keeps up with the code (issue 33: a new column or metric must
not mean a hunt, and a moved section must not leave a dead link):
  - every relative link in README.md and docs/*.md names a file that exists and, with a
    #fragment, a heading that file has (GitHub's anchor rule);
  - every table and column of the recording's schema (src/store/recording.cpp) is in
    docs/recording.md, each column under its table's heading;
  - every metric family the agent registers (`.Name("...")` in src/) is in docs/metrics.md.
Prints one line per problem and exits 1 if there is any; 0 and a one-line summary otherwise.
usage: scripts/check_docs.py [REPO_ROOT]"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
root = os.path.abspath(root)
problems = []


def read(rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def slug(heading):
    # GitHub: lower case, drop everything but letters, digits, spaces, '-' and '_', spaces to '-'
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    in_code = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6} (.*)$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            out.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return out


def check_links(rel):
    text = read(rel)
    # links outside code blocks and code spans
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(os.path.join(root, rel)), path)) \
            if path else os.path.join(root, rel)
        if not os.path.exists(dest):
            problems.append(f"{rel}: link to {target}: no such file")
            continue
        if frag and os.path.isfile(dest):
            if frag not in anchors(open(dest, encoding="utf-8").read()):
                problems.append(f"{rel}: link to {target}: "
                                f"{os.path.relpath(dest, root)} has no heading with that anchor")


def schema():
    src = read("src/store/recording.cpp")
    tables = {}
    for m in re.finditer(r"CREATE TABLE (\w+)\((.*?)\);", src, flags=re.S):
        cols = []
        depth, cur = 0, ""
        for ch in m.group(2):  # split on top-level commas (types may hold parentheses)
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            if ch == "," and depth == 0:
                cols.append(cur)
                cur = ""
            else:
                cur += ch
        cols.append(cur)
        names = []
        for c in cols:
            word = c.strip().split()[0] if c.strip() else ""
            if word and word.upper() not in ("PRIMARY", "UNIQUE", "FOREIGN", "CHECK",
                                             "CONSTRAINT"):
                names.append(word)
        tables[m.group(1)] = names
    return tables


def check_recording():
    doc = read("docs/recording.md")
    tables = schema()
    if len(tables) < 10:
        problems.append(f"src/store/recording.cpp: found only {len(tables)} CREATE TABLE "
                        "statements: the check's parser needs updating")
    lines = doc.split("\n")
    fenced, inside = [], False  # lines in code blocks: a "# comment" there is no heading
    for l in lines:
        if l.lstrip().startswith("```"):
            inside = not inside
        fenced.append(inside)
    for table, cols in tables.items():
        # the table's section: from a heading naming it to the next one of that level or above
        start = next((i for i, l in enumerate(lines)
                      if not fenced[i] and re.match(r"^#{2,4} ", l)
                      and re.search(rf"`{table}`", l)), None)
        if start is None:
            problems.append(f"docs/recording.md: no heading for table `{table}`")
            continue
        level = len(lines[start]) - len(lines[start].lstrip("#"))
        end = next((i for i in range(start + 1, len(lines))
                    if not fenced[i] and re.match(rf"^#{{1,{level}}} ", lines[i])), len(lines))
        section = "\n".join(lines[start:end])
        for col in cols:
            if f"`{col}`" not in section:
                problems.append(f"docs/recording.md: column `{table}.{col}` is not under "
                                "the table's heading")


def check_metrics():
    doc = read("docs/metrics.md")
    names = set()
    for dirpath, _, files in os.walk(os.path.join(root, "src")):
        for f in files:
            if f.endswith((".cpp", ".h")):
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    names.update(re.findall(r'\.Name\("([a-zA-Z_:][a-zA-Z0-9_:]*)"\)', fh.read()))
    if len(names) < 10:
        problems.append(f"src/: found only {len(names)} metric families: the check's parser "
                        "needs updating")
    for n in sorted(names):
        if f"`{n}`" not in doc and not re.search(rf"\b{re.escape(n)}\b", doc):
            problems.append(f"docs/metrics.md: metric family {n} (registered in src/) is not "
                            "documented")
    return len(names)


if not os.path.isdir(os.path.join(root, "docs")):
    print(f"check_docs: no docs/ in {root}: run it from the repository (or give its root)")
    sys.exit(1)
docs = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(root, "docs"))
                              if f.endswith(".md"))
docs += [d for d in ("bench/README.md", "eval/README.md", "fuzz/README.md")
         if os.path.isfile(os.path.join(root, d))]
for d in docs:
    check_links(d)
check_recording()
families = check_metrics()
for p in problems:
    print("check_docs:", p)
if problems:
    print(f"check_docs: {len(problems)} problems (fix the docs, or the link)")
    sys.exit(1)
print(f"check_docs: ok: {len(docs)} pages' links, {len(schema())} tables' columns, "
      f"{families} metric families")
