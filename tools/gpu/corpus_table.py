#!/usr/bin/env python3
"""corpus_table.py: renders the corpus table of tools/traces/corpus/README.md
(one row per workload: file, what it is, events, peak live bytes, PyTorch
native and expandable peak reserved with their ratio to peak live, the
native run's seconds) from the peers.json that capture_corpus.py wrote.

usage: corpus_table.py PEERS.json            print the table
       corpus_table.py PEERS.json --readme tools/traces/corpus/README.md
                                            rewrite the table in place, between
                                            the corpus-table:begin/end markers
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus_tools  # noqa: E402 (its folder first)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("peers", help="peers.json written by capture_corpus.py")
    ap.add_argument("--readme", help="rewrite the table in this file instead of printing it")
    args = ap.parse_args(argv)
    table = corpus_tools.render_table(corpus_tools.load_peers(args.peers))
    if not args.readme:
        sys.stdout.write(table)
        return 0
    with open(args.readme) as f:
        text = f.read()
    try:
        text = corpus_tools.replace_table(text, table)
    except ValueError as e:
        print("corpus_table.py: %s: %s" % (args.readme, e), file=sys.stderr)
        return 1
    with open(args.readme, "w") as f:
        f.write(text)
    print("corpus_table.py: %s: table rewritten (%d workloads)" % (
        args.readme, len(table.splitlines()) - 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
