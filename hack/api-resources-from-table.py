#!/usr/bin/env python3
"""Print what `kubectl api-resources` shows against upstream kube-apiserver
v1.36 for the built-in resources, computed from the generated table
crates/krate-api/src/generated/resources.rs.

Usage (from anywhere):
    python3 hack/api-resources-from-table.py [RESOURCES_RS] [--out PATH | --stdout]

Writes crates/krate-api/tests/data/api-resources-v1.36.txt by default.

It copies kubectl's behaviour: the preferred version of each group wins
(ServerPreferredResources), subresources are skipped, rows are sorted by API
group then by resource name, and columns are aligned like kubectl's tabwriter
(minimum width 6, padding 3, the last column unpadded).
"""

import argparse
import os
import re
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_RS = os.path.join(REPO_ROOT, "crates", "krate-api", "src", "generated", "resources.rs")
DEFAULT_OUT = os.path.join(REPO_ROOT, "crates", "krate-api", "tests", "data", "api-resources-v1.36.txt")

# --- a small reader for the Rust literals the generator writes ---------------

TOKEN_RE = re.compile(
    r'\s+|//[^\n]*|/\*.*?\*/|(?P<str>"(?:[^"\\]|\\.)*")|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<p>&|\[|\]|\{|\}|\(|\)|,|:)|(?P<other>.)',
    re.S,
)


def tokenize(text):
    out, pos = [], 0
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if not m:
            raise SystemExit(f"cannot read {text[pos:pos + 40]!r}")
        pos = m.end()
        if m.group("str") is not None:
            out.append(("str", bytes(m.group("str")[1:-1], "ascii").decode("unicode_escape")))
        elif m.group("word") is not None:
            out.append(("word", m.group("word")))
        elif m.group("p") is not None:
            out.append(("p", m.group("p")))
        elif m.group("other") is not None:
            out.append(("other", m.group("other")))
    return out


class Reader:
    def __init__(self, toks):
        self.t, self.i = toks, 0

    def peek(self):
        return self.t[self.i]

    def take(self, kind=None, val=None):
        tok = self.t[self.i]
        if (kind and tok[0] != kind) or (val and tok[1] != val):
            raise SystemExit(f"expected {kind} {val!r}, got {tok}")
        self.i += 1
        return tok[1]

    def value(self):
        kind, v = self.peek()
        if kind == "str":
            return self.take()
        if kind == "p" and v == "&":
            self.take()
            self.take("p", "[")
            items = []
            while self.peek() != ("p", "]"):
                items.append(self.value())
                if self.peek() == ("p", ","):
                    self.take()
            self.take("p", "]")
            return items
        if kind == "p" and v == "(":
            self.take()
            items = []
            while self.peek() != ("p", ")"):
                items.append(self.value())
                if self.peek() == ("p", ","):
                    self.take()
            self.take("p", ")")
            return tuple(items)
        if kind == "word" and v in ("true", "false"):
            self.take()
            return v == "true"
        if kind == "word":  # StructName { field: value, ... }
            self.take()
            self.take("p", "{")
            fields = {}
            while self.peek() != ("p", "}"):
                name = self.take("word")
                self.take("p", ":")
                fields[name] = self.value()
                if self.peek() == ("p", ","):
                    self.take()
            self.take("p", "}")
            return fields
        raise SystemExit(f"unexpected token {self.peek()}")


def read_static(text, name):
    m = re.search(r"pub static " + name + r"\s*:[^=]*=", text)
    if not m:
        raise SystemExit(f"no `pub static {name}` in the table")
    return Reader(tokenize(text[m.end() :])).value()


# --- kubectl api-resources ----------------------------------------------------


def api_resources(group_versions, resources):
    by_gv = {}
    for r in resources:
        by_gv.setdefault((r["group"], r["version"]), []).append(r)
    chosen = {}  # (group, plural) -> (apiVersion, resource); preferred (listed first) wins
    for group, versions in group_versions:
        for version in versions:
            for r in by_gv.get((group, version), []):
                chosen.setdefault((group, r["plural"]), (f"{group}/{version}" if group else version, r))
    rows = sorted(chosen.items(), key=lambda kv: (kv[0][0], kv[0][1]))
    return [(r["plural"], ",".join(r["short_names"]), gv, "true" if r["namespaced"] else "false", r["kind"])
            for (_, _), (gv, r) in rows]


def tabwrite(lines, minwidth=6, padding=3):
    ncols = len(lines[0]) - 1  # the last cell is not tab-terminated, so not aligned
    widths = [max(minwidth, max(len(l[c]) for l in lines) + padding) for c in range(ncols)]
    out = []
    for l in lines:
        out.append("".join(l[c].ljust(widths[c]) for c in range(ncols)) + l[-1])
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table", nargs="?", default=DEFAULT_RS, help="generated resources.rs")
    ap.add_argument("--out", default=DEFAULT_OUT, help="output path")
    ap.add_argument("--stdout", action="store_true", help="print instead of writing --out")
    args = ap.parse_args(argv)

    with open(args.table, encoding="utf-8") as f:
        text = f.read()
    group_versions = read_static(text, "GROUP_VERSIONS")
    resources = read_static(text, "RESOURCES")
    header = ("NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND")
    out = tabwrite([header] + api_resources(group_versions, resources))
    if args.stdout:
        sys.stdout.write(out)
        return
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(out)
    print(f"wrote {os.path.relpath(args.out)}: {out.count(chr(10)) - 1} resources", file=sys.stderr)


if __name__ == "__main__":
    main()
