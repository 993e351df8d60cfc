"""`edgepack report run1.json [run0.json ...] -o index.html [--markdown out.md] [--fail-if-slower 1.10]`.

The first file is the run the report is about (the new one); the others are overlaid and compared with it.
Unknown schema versions are refused (exit 2). With --fail-if-slower F and two files (new, old), exits 1 when
any size both measured got slower than F x the old median, one line per such size.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import DimError, EdgepackError


def _parse_at(args: list[str] | None) -> dict[str, int] | None:
    if not args:
        return None
    out = {}
    for a in args:
        name, _, v = a.partition("=")
        if not name or not v.strip().lstrip("-").isdigit():
            raise DimError(f"--at '{a}' is not NAME=VALUE (e.g. --at seq=32)")
        out[name] = int(v)
    return out


def _write(path: str, text: str) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    print(f"wrote {p}")


def _check(runs, factor: float) -> int:
    from ..report.compare import regressions

    if len(runs) != 2:
        raise EdgepackError(f"--fail-if-slower compares two runs (new.json old.json), got {len(runs)} file(s)")
    bad = regressions(runs[0], runs[1], factor)
    for line in bad:
        print(f"slower: {line}", file=sys.stderr)
    if bad:
        print(f"edgepack: {len(bad)} size(s) of {runs[0].source} slower than {runs[1].source} by more than "
              f"x{factor:.2f}", file=sys.stderr)
        return 1
    print(f"no size of {runs[0].source} is slower than {runs[1].source} by more than x{factor:.2f}")
    return 0


def _cmd(a: argparse.Namespace) -> int:
    from ..paths import output_file
    from ..report.markdown import markdown
    from ..report.schema import load_run

    for path, flag, example in ((a.output, "-o", "index.html"), (a.markdown, "--markdown", "summary.md")):
        if path:
            output_file(path, flag, example)
    runs = [load_run(p) for p in a.runs]
    at = _parse_at(a.at)
    if a.output:
        from ..report.html import render

        _write(a.output, render(runs, at))
    if a.markdown:
        _write(a.markdown, markdown(runs))
    if a.fail_if_slower is not None:
        return _check(runs, a.fail_if_slower)
    if not (a.output or a.markdown):
        print(markdown(runs))
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="HTML/Markdown report from `edgepack bench` results; CI regression check")
    p.add_argument("runs", nargs="+", metavar="RUN.json", help="bench results, the newest first")
    p.add_argument("-o", "--output", metavar="INDEX.html", help="write the self-contained HTML report here")
    p.add_argument("--markdown", metavar="OUT.md", help="write a Markdown summary here")
    p.add_argument("--at", action="append", metavar="NAME=VALUE",
                   help="size for the per-operator breakdown (default: the largest profiled size)")
    p.add_argument("--fail-if-slower", type=float, metavar="FACTOR",
                   help="with new.json old.json: exit 1 if any common size's median is more than FACTOR x slower")
    p.set_defaults(fn=_cmd)
