"""The hardware adapter declares every program it runs in one place (`metax_hw.tools.HOST_TOOLS`).

The agent images are built to carry exactly the packaged ones (tests/images/test_contents.py); this keeps the
declaration honest: every ``runner.run(...)`` call in `metax_hw` names its tool through a declared constant.
"""

from __future__ import annotations

import ast
from pathlib import Path

import metax_hw
from metax_hw import gpus, tools

ADAPTER = Path(metax_hw.__file__).parent


def _tool_constants() -> dict[str, str]:
    names = {name: value for name, value in vars(tools).items() if isinstance(value, str) and name.isupper()}
    names.update({"MX_SMI": gpus.MX_SMI})
    return names


def _run_calls() -> list[tuple[str, ast.expr]]:
    calls = []
    for path in sorted(ADAPTER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "run"
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "runner"
            ):
                calls.append((f"{path.name}:{node.lineno}", node.args[0]))
    return calls


def test_every_tool_the_adapter_runs_is_declared() -> None:
    constants = _tool_constants()
    calls = _run_calls()
    assert len(calls) >= 8  # modprobe, insmod, rmmod, modinfo and four mx-smi calls today
    for where, arg in calls:
        if isinstance(arg, ast.Attribute):
            name = arg.attr
        elif isinstance(arg, ast.Name):
            name = arg.id
        else:
            raise AssertionError(f"{where}: the tool is not named through a constant of metax_hw.tools")
        assert constants.get(name) in tools.HOST_TOOLS, f"{where}: {name} is not in metax_hw.tools.HOST_TOOLS"


def test_the_kmod_tools_come_from_debian_kmod_and_nsenter_from_util_linux() -> None:
    assert {t for t, pkg in tools.HOST_TOOLS.items() if pkg == "kmod"} == {"modprobe", "insmod", "rmmod", "modinfo"}
    assert tools.HOST_TOOLS[tools.NSENTER] == "util-linux"
    assert tools.HOST_TOOLS[gpus.MX_SMI] is None
