"""``python -m metax_dev.scanner``: scan the chart and the operator's objects, compare with the reviewed allowlist.

    python -m metax_dev.scanner              # new findings (ready to paste) and stale entries; exit 1 if any
    python -m metax_dev.scanner --write      # rewrite the allowlist: matched kept, stale dropped, new with reason ""
    python -m metax_dev.scanner --findings   # every finding, one line each (what the allowlist is reviewed against)
    python -m metax_dev.scanner --lock 3.3.30  # re-pin the scanner's environment (metax_dev/scanner/requirements.lock)

It uses the same cached scanner environment and helm as tests/security (docs/security.md "The manifest scanner").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from metax_dev.chart import CHART_DIR
from metax_dev.controlplane import build
from metax_dev.scanner import allowlist, checkov, inputs, scan

DESCRIPTION: Final = "Scan the chart and the operator's objects with Checkov; compare with the reviewed allowlist."
ALLOWLIST: Final = CHART_DIR.parents[1] / "tests" / "security" / "scanner-allowlist.yaml"


def scanner_name(version: str) -> str:
    """How the allowlist's ``scanner`` line names the scanner it was reviewed against."""
    return f"{checkov.PACKAGE} {version}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metax_dev.scanner", description=DESCRIPTION)
    parser.add_argument("--allowlist", type=Path, default=ALLOWLIST)
    parser.add_argument("--values", type=Path, default=inputs.VALUES, help="the chart values the scan renders with")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help="rewrite the allowlist from this scan")
    what.add_argument("--findings", action="store_true", help="print every finding")
    what.add_argument("--lock", metavar="VERSION", help="re-pin the scanner's environment to Checkov VERSION")
    args = parser.parse_args(argv)

    if args.lock:
        checkov.LOCK.write_text(checkov.lock_text(args.lock))
        print(f"wrote {checkov.LOCK}: review {args.allowlist} against {scanner_name(args.lock)}'s findings")
        return 0
    installed = checkov.install()
    helm = build.build(quiet=True).binary("helm")
    result = scan.scan(installed, inputs.manifests(helm, values=args.values))
    name = scanner_name(result.version)
    print(f"{name}: {len(result.scanned)} objects, {result.checks_run} checks, {len(result.findings)} findings")
    if off := inputs.switches_off(values=args.values):
        print(f"warning: switches left off in {args.values} (their objects are not scanned): {', '.join(off)}")
    if args.findings:
        for f in result.findings:
            print(f"{f.check}\t{f.object}\t{f.container or '-'}\t{f.title}")
        return 0
    current = allowlist.load(args.allowlist) if args.allowlist.is_file() else allowlist.Allowlist("", ())
    if args.write:
        args.allowlist.write_text(allowlist.regenerate(current, result.findings, name))
        current = allowlist.load(args.allowlist)
        print(f"wrote {args.allowlist}")
    comparison = allowlist.compare(result.findings, current)
    problems = allowlist.problems(current, name)
    if text := allowlist.summary(comparison):
        print(text)
    for problem in problems:
        print(problem)
    return 0 if comparison.clean and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
