#!/usr/bin/python3
"""Prints the layer map of docs/layers.md: every package of the module with
its one-line job (its package comment, to the first ": " or ". ", 100
characters at most) and the module packages it imports, internal plumbing
(checked, dl, units, pace) and test helpers left out:

  go list -f '{{.ImportPath}}|{{.Doc}}|{{join .Imports " "}}' ./... | scripts/layer-map.py
"""
import re, sys
M = "github.com/m2n-dev/m2n/"
PLUMB = {"internal/checked", "internal/dl", "internal/units", "internal/pace"}
for l in sys.stdin:
    p, d, i = l.rstrip("\n").split("|")
    p = p.replace(M, "")
    if "testutil" in p or p.endswith("test") or p == "examples" or "/" not in M + p:
        continue
    name = p.split("/")[-1]
    d = re.sub(r"^(Package|Command) %s (is )?" % re.escape(name), "", d)
    d = re.split(r": |\. |\.$", d)[0]
    imps = sorted(x.replace(M, "") for x in i.split() if x.startswith(M) and x.replace(M, "") not in PLUMB)
    print("- `%s`: %s%s" % (p, d[:100], " -> " + ", ".join(imps) if imps else ""))
