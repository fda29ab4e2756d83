"""Shell completion generated from the parser, and the kubectl plugin's names (issue 27 item 3).

Aspects: the bash script, sourced by a real bash, completes subcommands, a subcommand's options and an
option's choices; the zsh script is valid zsh (``zsh -n``) naming every subcommand; ``kubectl-metax`` is the
same command under its plugin name; ``kubectl_complete-metax`` answers kubectl's plugin-completion protocol
(candidates, then ``:4``), from the same parser. (kubectl itself calling it: checked by hand with the
control plane's kubectl, ``kubectl __complete metax do``.) ``render --component`` completes the component names
in all three (issue 39 item 7) and still takes an object name.
"""

from __future__ import annotations

import pathlib
import shlex
import subprocess

import pytest

from metax_core import components
from services.cli import completion, main

COMPONENTS = [c.value for c in components.Component]


def _script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main.main(["completion", shell]) == 0
    return capsys.readouterr().out


def _bash_complete(script: pathlib.Path, *words: str) -> list[str]:
    line = " ".join(words)
    quoted = " ".join(shlex.quote(w) for w in words)
    program = (
        f"source {script}\n"
        f"COMP_WORDS=({quoted})\n"
        f"COMP_CWORD={len(words) - 1}\nCOMP_LINE={line!r}\nCOMP_POINT=${{#COMP_LINE}}\n"
        '_shtab_metax_operator\nprintf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.split()


def test_bash_completes_subcommands_options_and_choices(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "metax-operator.bash"
    script.write_text(_script("bash", capsys))
    assert _bash_complete(script, "metax-operator", "do") == ["doctor"]
    assert {"plan", "confirm"} <= set(_bash_complete(script, "metax-operator", "rollout", ""))
    assert "--output" in _bash_complete(script, "metax-operator", "doctor", "--")
    assert _bash_complete(script, "metax-operator", "doctor", "-o", "") == ["table", "json"]
    assert "--driver-config" in _bash_complete(script, "metax-operator", "diff", "--")  # diff's edit of driver-config
    assert _bash_complete(script, "metax-operator", "render", "--component", "") == COMPONENTS
    assert _bash_complete(script, "metax-operator", "render", "-f", "x.yaml", "--component", "gpu") == [
        "gpuLabel",
        "gpuDevice",
        "gpuScheduler",
    ]


def test_zsh_script_is_valid_and_names_every_subcommand(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "_metax-operator"
    script.write_text(_script("zsh", capsys))
    subprocess.run(["zsh", "-n", str(script)], check=True, timeout=30)
    text = script.read_text()
    for command in ("doctor", "rollout", "validate", "render", "uninstall", "completion"):
        assert f"\n    {command}:'" in text, command  # the subcommand list
    (component,) = [line for line in text.splitlines() if line.strip().startswith('"--component[')]
    assert component.endswith(f':component:({" ".join(COMPONENTS)})"')  # _arguments' list of values


def test_the_plugin_name() -> None:
    assert main.program_name("/usr/local/bin/kubectl-metax") == main.PLUGIN
    assert main.program_name("metax-operator") == main.PROG
    assert main.build_parser(main.PLUGIN).prog == "kubectl-metax"


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["do"], ["doctor"]),
        ([""], None),
        (["rollout", "c"], ["confirm"]),
        (["doctor", "-o", ""], ["table", "json"]),
        (["doctor", "node-1", "--o"], ["--output"]),
        (["-v", "doc"], ["doctor"]),
        (["diff", "--driver"], ["--driver-config"]),
        (["render", "--component", ""], COMPONENTS),
        (["render", "-f", "x.yaml", "--component", "v"], ["vfioManager"]),
    ],
)
def test_kubectl_plugin_completion(words: list[str], expected: list[str] | None) -> None:
    answer = completion.kubectl_complete(main.build_parser(main.PLUGIN), words).splitlines()
    assert answer[-1] == f":{completion.NO_FILE_COMPLETION}"
    if expected is None:
        assert {"doctor", "rollout", "validate", "completion"} <= set(answer[:-1])
    else:
        assert answer[:-1] == expected
