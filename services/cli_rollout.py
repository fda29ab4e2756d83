"""`metax-operator rollout plan`: show how a driver upgrade policy would roll out (R-ROLLOUT).

Placeholder while the rollout machine (issue #3) lands; the subcommand is registered so the CLI loads.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    rollout = subparsers.add_parser("rollout", help="driver rollout tools").add_subparsers(
        dest="rollout_command", required=True, metavar="COMMAND"
    )
    p = rollout.add_parser("plan", help="simulate a driver rollout and print its steps and batches")
    p.add_argument("-f", "--file", required=True, help="YAML or JSON file, - for stdin")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("error: rollout plan is not implemented yet", file=sys.stderr)
    return 1
