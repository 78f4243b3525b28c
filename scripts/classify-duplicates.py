#!/usr/bin/python3
"""Sorts the pairs of repeated blocks that `duplicates` lists by what repeats.

  duplicates --most 200 --seconds 120 > dups.txt
  scripts/classify-duplicates.py ROOT dups.txt [KIND]

`duplicates` marks some pairs boilerplate by itself; this sorts the rest by
the lines of both sides, with one set of rules for every tree (issue 26
compares the tree before and after its redesign with them):

  import list          import blocks (packages that need the same packages)
  JSON declarations    struct fields with json tags (wire and report schemas)
  flag registrations   cobra flag definitions
  example main         examples/*/main.go: each example stands alone, so that
                       a user can copy one
  test table           rows and headers of table-driven tests
  declarations/data    type, const and field declarations, data tables
  logic                everything else: statements that repeat

A pair is logic when either side is. With KIND, the pairs of that kind are
listed after the counts.
"""
import re
import sys
from collections import Counter

IMPORT = re.compile(r'^("[^"]+"|\)|import \(|[a-z_]+ "[^"]+"|package \w+)$')
FIELD = re.compile(r'^[A-Za-z_][\w, ]*\s+[\[\]\*\w\.\{\}]+(\s+`[^`]*`)?(\s*//.*)?$')
ROW = re.compile(r'^\{.*\},?$|^\{.*,$|^\w+:|^".*",?$|^\d')
DECL = re.compile(r'^(type|const|var) |^\)|^\w+\s*(=.*)?$|^\{".*|^".*":')


def lines(root, spec):
    path, span = spec.rsplit(':', 1)
    a, b = map(int, span.split('-'))
    with open(f'{root}/{path}') as f:
        return path, f.read().split('\n')[a - 1:b]


def kind(path, block):
    s = [x.strip() for x in block if x.strip() and not x.strip().startswith('//')]
    n = len(s)
    if n == 0:
        return 'declarations/data'
    if any(x.startswith('"') for x in s) and sum(bool(IMPORT.match(x)) for x in s) >= n - 1:
        return 'import list'
    if sum('json:"' in x for x in s) >= n / 2:
        return 'JSON declarations'
    if sum(bool(re.match(r'(fs|f|cmd\.Flags\(\))\.\w+Var', x)) for x in s) >= n / 2:
        return 'flag registrations'
    if re.match(r'examples/[^/]+/main\.go$', path):
        return 'example main'
    table = sum(bool(ROW.match(x) or FIELD.match(x)) or 'range []struct' in x
                or x in ('}{', '}) {', '},', '}', '{') for x in s)
    if path.endswith('_test.go') and table >= 0.6 * n:
        return 'test table'
    decl = sum(bool(FIELD.match(x) or DECL.match(x)) or x in ('}', '},', '){', '(') for x in s)
    if decl >= 0.7 * n:
        return 'declarations/data'
    return 'logic'


def main():
    root, dups = sys.argv[1], sys.argv[2]
    want = sys.argv[3] if len(sys.argv) > 3 else None
    counts, listed = Counter(), []
    with open(dups) as f:
        rows = [l.split() for l in f if re.match(r'^D\d+ ', l) and 'boilerplate' not in l]
    for row in rows:
        ka, kb = (kind(*lines(root, spec)) for spec in (row[1], row[3]))
        k = ka if ka == kb else ('logic' if 'logic' in (ka, kb) else ka)
        counts[k] += 1
        if k == want:
            listed.append(' '.join(row[:4]))
    print(f'{sum(counts.values()):4d} pairs not marked boilerplate')
    for k, v in sorted(counts.items()):
        print(f'{v:4d} {k}')
    for l in listed:
        print(l)


if __name__ == '__main__':
    main()
