"""``metax-operator completion bash|zsh``: a shell completion script generated from the command's own parser.

Why generated: the subcommands and options are defined once, in the argparse parser (`services.cli.main`);
a hand-written script would drift from it. `shtab` turns the parser into a static bash or zsh script (no
Python runs at each TAB). It is the ``completion`` extra (``pip install 'metax-gpu-operator[completion]'``):
the product's images never complete shells, so they do not carry it.

    source <(metax-operator completion bash)        # or: metax-operator completion zsh > "${fpath[1]}/_metax-operator"
    source <(kubectl-metax completion bash)         # the kubectl plugin's name completes the same commands
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from typing import Any

SHELLS = ("bash", "zsh")


class MissingExtra(Exception):
    """shtab is not installed."""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    try:
        import shtab
    except ImportError as exc:
        raise MissingExtra(
            "shell completion needs the 'completion' extra: pip install 'metax-gpu-operator[completion]'"
        ) from exc
    text: str = shtab.complete(parser, shell=shell)
    return text


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "completion",
        help="print a bash or zsh completion script for this command",
        description="Print a completion script generated from this command's parser. bash: "
        '`source <(%(prog)s bash)`; zsh: `%(prog)s zsh > "${fpath[1]}/_<command>"`.',
    )
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=None, completion=True)


OFFERED = "metax_offered"
"""The attribute `offer` sets on an option: the words `candidates` completes its value with."""


def offer(action: argparse.Action, words: Sequence[str]) -> None:
    """Complete ``action``'s value with ``words`` without limiting it to them (``choices`` would refuse any other
    value, e.g. an object name for ``render --component``): shtab's ``complete`` (a bash function in the script's
    preamble; a zsh value list) and `candidates` (``kubectl_complete-metax``) read it."""
    listed = " ".join(shlex.quote(w) for w in words)
    function = f"_metax_offer_{action.dest}"
    action.complete = {  # type: ignore[attr-defined]  # shtab's protocol: an attribute on the action
        "bash": function,
        "zsh": f"({listed})",
        "preamble": {"bash": f'{function}() {{ compgen -W {shlex.quote(listed)} -- "$1"; }}'},
    }
    setattr(action, OFFERED, tuple(words))


NO_FILE_COMPLETION = 4
"""cobra's ShellCompDirectiveNoFileComp: what kubectl's own completion reads after the candidates."""


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option(parser: argparse.ArgumentParser, word: str) -> argparse.Action | None:
    return next((a for a in parser._actions if word in a.option_strings), None)


def candidates(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """What may complete the last of ``words`` (the arguments after the command's name; the last one is
    being typed, possibly empty): subcommands, options, or an option's choices, from the parser itself."""
    *done, typing = words or [""]
    current, expects = parser, None
    for word in done:
        if expects is not None:
            expects = None
            continue
        option = _option(current, word)
        if option is not None:
            expects = None if option.nargs == 0 else option  # store_true, --help, --version take no value
            continue
        current = _subcommands(current).get(word, current)
    if expects is not None:
        pool = [str(c) for c in getattr(expects, OFFERED, None) or expects.choices or ()]
    elif typing.startswith("-"):
        pool = [s for a in current._actions for s in a.option_strings]
    else:
        pool = list(_subcommands(current))
    return [c for c in pool if c.startswith(typing)]


def kubectl_complete(parser: argparse.ArgumentParser, words: list[str]) -> str:
    """What kubectl (≥ 1.26) expects from a plugin's ``kubectl_complete-<plugin>``: one candidate a line, then
    ``:<directive>``."""
    return "".join(f"{c}\n" for c in candidates(parser, words)) + f":{NO_FILE_COMPLETION}\n"
