"""The ``driver-config`` ConfigMap: VFs per GPU and kernel module parameters, per node (R-VF, R-MODPARAM).

Administrators edit this ConfigMap by hand (§3.2.6, §3.2.7), so parsing forgives the forms the seed prints
and refuses every doubtful value, naming the key path, all problems at once (`InvalidSpec`):

* each data key (``node-vfnums``, ``module-params``, ``node-module-params``) is a YAML string, or already a
  mapping; empty, blank or ``null`` means "not configured";
* text whose first line is flush left while its siblings are indented (how the seed prints values inside
  JSON quotes) is re-read with the first line aligned to the rest, when it is not valid YAML as written;
* ``node-vfnums`` may omit its ``nodes:`` wrapper, and ``node-module-params`` may have one: a mapping whose
  only key is ``nodes`` is the wrapper (so a node called "nodes" needs the wrapper);
* YAML is read strictly (as YAML 1.2 would, `metax_core.spec.text.StrictLoader`): a key given twice and tab
  indentation are errors, integers are decimal digits only (``0x10`` and ``1_000`` are strings, so they are
  refused where a number is due), and only true/false are booleans (a node called ``on`` stays a name).

docs/driver-config.md is the user-facing description. `for_node` applies the precedence (a node's entry in
node-module-params replaces the cluster's module-params whole), `vf_count_plan` says what to write to each
PF's ``sriov_numvfs``, and `module_params_decision` says whether the driver must be reloaded.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import yaml

from metax_core.errors import FieldError, InvalidSpec
from metax_core.inventory import FunctionKind, ModuleState, PciAddress, PciFunction
from metax_core.spec import converter, text
from metax_core.wire import meta

CONFIGMAP_NAME = meta.DRIVER_CONFIG_MAP
NODE_VFNUMS = "node-vfnums"
MODULE_PARAMS = "module-params"
NODE_MODULE_PARAMS = "node-module-params"
DATA_KEYS = (NODE_VFNUMS, MODULE_PARAMS, NODE_MODULE_PARAMS)
NODES_WRAPPER = "nodes"
VFNUM = "vfnum"
MAX_VFNUM = 65535
"""SR-IOV TotalVFs is a 16-bit field: nothing above this can ever be valid."""
MAX_KERNEL_INT = 2**31 - 1


class ModuleParam(enum.Enum):
    """The ``metax`` module parameters driver-config may set (§3.2.7)."""

    GPU_MODEL = "gpu_model"
    XCORE_PAGE_SIZE = "xcore_page_size"


SUPPORTED_PARAMS = tuple(sorted(p.value for p in ModuleParam))
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


@attrs.frozen
class DriverConfig:
    """The parsed ConfigMap. Node names are exact Kubernetes node names."""

    node_vfnums: Mapping[str, int] = attrs.field(factory=dict)
    module_params: Mapping[str, str] = attrs.field(factory=dict)
    """Cluster-wide parameters: parameter name → value as modprobe takes it."""
    node_module_params: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    """Per-node parameters; a node listed here ignores ``module_params`` entirely (even with ``{}``)."""


class ParamSource(enum.Enum):
    """Which part of driver-config a node's module parameters came from."""

    NODE = NODE_MODULE_PARAMS
    CLUSTER = MODULE_PARAMS
    DEFAULT = "default"


@attrs.frozen
class NodeDriverConfig:
    vfnum: int
    """VFs per GPU; 0 = no virtualisation."""
    module_params: Mapping[str, str]
    params_source: ParamSource = ParamSource.DEFAULT


def _realigned(text: str) -> str | None:
    """``"a: 1\\n    b: 2"`` → ``"a: 1\\nb: 2"``: the first line joins its indented siblings."""
    lines = text.strip("\n").split("\n")
    rest = [line for line in lines[1:] if line.strip()]
    if not rest:
        return None
    indent = min(len(line) - len(line.lstrip(" ")) for line in rest)
    if indent == 0:
        return None
    return "\n".join([lines[0].strip()] + [line[indent:] for line in lines[1:]])


def _yaml_problem(exc: text.TextError) -> str:
    where = f" (line {exc.line}, column {exc.column})" if exc.line is not None else ""
    return f"{exc.message}{where}"


def _load(key: str, value: object, errors: list[FieldError]) -> object:
    """The document under one data key, or None (with an error recorded) when it cannot be read."""
    if not isinstance(value, str):
        return value
    tabbed = [n for n, line in enumerate(value.split("\n"), 1) if "\t" in line[: len(line) - len(line.lstrip())]]
    if tabbed:
        errors.append(FieldError(key, f"line {tabbed[0]} is indented with a tab: YAML indentation must use spaces"))
        return None
    try:
        return text.load_value(value, key, loader=text.StrictLoader)
    except text.TextError as exc:
        retry = _realigned(value) if exc.line is not None else None
        if retry is not None:
            try:
                return text.load_value(retry, key, loader=text.StrictLoader)
            except text.TextError:
                pass
        errors.append(FieldError(key, f"is not valid YAML: {_yaml_problem(exc)}"))
        return None


def _node_key(path: str, key: object, errors: list[FieldError]) -> str | None:
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)  # a node named "123" reads as a number in YAML
    if not isinstance(key, str) or len(key) > 253 or not _NODE_NAME.match(key):
        errors.append(FieldError(f"{path}.{key}", "is not a valid node name (lowercase letters, digits, '-' and '.')"))
        return None
    return key


def _unwrap(path: str, document: Mapping[Any, Any]) -> tuple[str, Mapping[Any, Any] | None]:
    inner = document.get(NODES_WRAPPER)
    if list(document) == [NODES_WRAPPER] and (inner is None or isinstance(inner, Mapping)):
        return f"{path}.{NODES_WRAPPER}", inner or {}
    return path, document


def _int_value(path: str, value: object, *, maximum: int, errors: list[FieldError]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        hint = " (remove the quotes)" if isinstance(value, str) and value.strip().isdigit() else ""
        errors.append(FieldError(path, f"must be a non-negative integer, got {converter.describe(value)}{hint}"))
        return None
    if value < 0 or value > maximum:
        errors.append(FieldError(path, f"must be between 0 and {maximum}, got {value}"))
        return None
    return value


def _parse_vfnums(document: object, errors: list[FieldError]) -> dict[str, int]:
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        errors.append(
            FieldError(
                NODE_VFNUMS,
                f"must be a mapping like 'nodes: {{<node>: {{vfnum: N}}}}', got {converter.describe(document)}",
            )
        )
        return {}
    path, nodes = _unwrap(NODE_VFNUMS, document)
    result: dict[str, int] = {}
    for raw_key, entry in (nodes or {}).items():
        node = _node_key(path, raw_key, errors)
        if node is None:
            continue
        here = f"{path}.{node}"
        if not isinstance(entry, Mapping):
            hint = (
                f" (write '{node}: {{vfnum: {entry}}}')"
                if isinstance(entry, int) and not isinstance(entry, bool)
                else ""
            )
            errors.append(
                FieldError(here, f"must be a mapping like {{vfnum: N}}, got {converter.describe(entry)}{hint}")
            )
            continue
        for extra in sorted(str(k) for k in entry if k != VFNUM):
            errors.append(FieldError(f"{here}.{extra}", f"unknown field; supported: {VFNUM}"))
        if VFNUM not in entry:
            errors.append(FieldError(f"{here}.{VFNUM}", "required field is missing"))
            continue
        count = _int_value(f"{here}.{VFNUM}", entry[VFNUM], maximum=MAX_VFNUM, errors=errors)
        if count is not None:
            result[node] = count
    return result


def _param_value(path: str, name: str, value: object, errors: list[FieldError]) -> str | None:
    if name == ModuleParam.XCORE_PAGE_SIZE.value:
        number = _int_value(path, value, maximum=MAX_KERNEL_INT, errors=errors)
        return None if number is None else str(number)
    # gpu_model: a non-negative integer or a short token modprobe passes through unquoted.
    if isinstance(value, int) and not isinstance(value, bool):
        number = _int_value(path, value, maximum=MAX_KERNEL_INT, errors=errors)
        return None if number is None else str(number)
    if isinstance(value, str) and _TOKEN.match(value):
        return value
    errors.append(
        FieldError(
            path,
            "must be a non-negative integer or a word of letters, digits, '_', '.' and '-' "
            f"(at most 64 characters), got {converter.describe(value)}",
        )
    )
    return None


def _parse_params(path: str, document: object, errors: list[FieldError]) -> dict[str, str]:
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        errors.append(FieldError(path, f"must be a mapping of module parameters, got {converter.describe(document)}"))
        return {}
    result: dict[str, str] = {}
    for raw_name, value in document.items():
        name = str(raw_name)
        here = f"{path}.{name}"
        if name not in SUPPORTED_PARAMS:
            close = difflib.get_close_matches(name, SUPPORTED_PARAMS, n=1, cutoff=0.6)
            guess = f"did you mean {close[0]!r}? " if close else ""
            errors.append(
                FieldError(here, f"unknown module parameter; {guess}supported: {', '.join(SUPPORTED_PARAMS)}")
            )
            continue
        text = _param_value(here, name, value, errors)
        if text is not None:
            result[name] = text
    return result


def _parse_node_params(document: object, errors: list[FieldError]) -> dict[str, dict[str, str]]:
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        errors.append(
            FieldError(
                NODE_MODULE_PARAMS, f"must be a mapping of node name → parameters, got {converter.describe(document)}"
            )
        )
        return {}
    path, nodes = _unwrap(NODE_MODULE_PARAMS, document)
    result: dict[str, dict[str, str]] = {}
    for raw_key, entry in (nodes or {}).items():
        node = _node_key(path, raw_key, errors)
        if node is not None:
            result[node] = _parse_params(f"{path}.{node}", entry, errors)
    return result


def parse(data: Mapping[str, object] | None) -> DriverConfig:
    """The ConfigMap's ``data`` → DriverConfig, or InvalidSpec listing every problem with its key path."""
    errors: list[FieldError] = []
    data = data or {}
    for key in sorted(str(k) for k in data if k not in DATA_KEYS):
        close = difflib.get_close_matches(key, DATA_KEYS, n=1, cutoff=0.6)
        guess = f"did you mean {close[0]!r}? " if close else ""
        errors.append(FieldError(key, f"unknown key; {guess}supported: {', '.join(DATA_KEYS)}"))
    vfnums = _parse_vfnums(_load(NODE_VFNUMS, data.get(NODE_VFNUMS), errors), errors)
    cluster = _parse_params(MODULE_PARAMS, _load(MODULE_PARAMS, data.get(MODULE_PARAMS), errors), errors)
    per_node = _parse_node_params(_load(NODE_MODULE_PARAMS, data.get(NODE_MODULE_PARAMS), errors), errors)
    if errors:
        raise InvalidSpec(errors)
    return DriverConfig(node_vfnums=vfnums, module_params=cluster, node_module_params=per_node)


def render(config: DriverConfig) -> dict[str, str]:
    """ConfigMap ``data`` for ``config`` in the canonical form (what the operator writes at install)."""

    def dump(value: object) -> str:
        return yaml.safe_dump(value, default_flow_style=False, sort_keys=True)

    def typed(params: Mapping[str, str]) -> dict[str, object]:
        return {k: int(v) if v.isascii() and v.isdigit() and str(int(v)) == v else v for k, v in params.items()}

    return {
        NODE_VFNUMS: dump({NODES_WRAPPER: {n: {VFNUM: v} for n, v in config.node_vfnums.items()}}),
        MODULE_PARAMS: dump(typed(config.module_params)) if config.module_params else "",
        NODE_MODULE_PARAMS: dump({NODES_WRAPPER: {n: typed(p) for n, p in config.node_module_params.items()}})
        if config.node_module_params
        else "",
    }


def for_node(config: DriverConfig, node_name: str) -> NodeDriverConfig:
    """What one node runs: its vfnum (0 when unlisted) and its module parameters (node entry wins whole)."""
    vfnum = config.node_vfnums.get(node_name, 0)
    if node_name in config.node_module_params:
        return NodeDriverConfig(vfnum, dict(config.node_module_params[node_name]), ParamSource.NODE)
    if config.module_params:
        return NodeDriverConfig(vfnum, dict(config.module_params), ParamSource.CLUSTER)
    return NodeDriverConfig(vfnum, {}, ParamSource.DEFAULT)


# ---------------------------------------------------------------------------------------------------------
# Applying it on a node


class PlanOutcome(enum.Enum):
    NOTHING = "nothing"
    APPLY = "apply"
    REFUSE = "refuse"
    """At least one PF cannot take the count: nothing is written (all GPUs of a node stay alike)."""


@attrs.frozen
class PfWrite:
    pf: PciAddress
    current: int
    target: int
    """The VF count to set. Going from N to M through zero (the kernel refuses N → M directly) is the
    hardware adapter's business (`ports.hardware.DriverBinder.set_vf_count`), not a decision made here."""


@attrs.frozen
class VfCountPlan:
    outcome: PlanOutcome
    desired: int
    writes: tuple[PfWrite, ...] = ()
    skipped: tuple[PciAddress, ...] = ()
    """PFs bound to vfio-pci: they belong to a virtual machine and are left alone."""
    problems: tuple[str, ...] = ()


def vf_count_plan(
    functions: Sequence[PciFunction], desired_vfnum: int, *, vfio_driver: str = "vfio-pci"
) -> VfCountPlan:
    """What to write to each PF's ``sriov_numvfs`` so that every PF has ``desired_vfnum`` VFs."""
    pfs = sorted((f for f in functions if f.kind is FunctionKind.PF), key=lambda f: f.address)
    skipped = tuple(f.address for f in pfs if f.driver == vfio_driver)
    problems: list[str] = []
    writes: list[PfWrite] = []
    if desired_vfnum < 0:
        problems.append(f"vfnum must not be negative, got {desired_vfnum}")
    for pf in pfs:
        if pf.address in skipped or pf.sriov_numvfs == desired_vfnum:
            continue
        if desired_vfnum > 0 and pf.sriov_totalvfs == 0:
            problems.append(
                f"{pf.address} does not support SR-IOV (sriov_totalvfs is 0); VFs need the virtualisation "
                "firmware (driver.fwEnableVirt)"
            )
            continue
        if desired_vfnum > pf.sriov_totalvfs:
            problems.append(f"{pf.address} supports at most {pf.sriov_totalvfs} VFs, {desired_vfnum} were asked for")
            continue
        writes.append(PfWrite(pf.address, pf.sriov_numvfs, desired_vfnum))
    if problems:
        return VfCountPlan(PlanOutcome.REFUSE, desired_vfnum, skipped=skipped, problems=tuple(problems))
    outcome = PlanOutcome.APPLY if writes else PlanOutcome.NOTHING
    return VfCountPlan(outcome, desired_vfnum, writes=tuple(writes), skipped=skipped)


class ModuleAction(enum.Enum):
    KEEP = "keep"
    LOAD = "load"
    """The module is not loaded: load it with the parameters."""
    RELOAD = "reload"
    """Loaded with other parameters: unload and load again (parameters are read at load time)."""


@attrs.frozen
class ModuleParamsDecision:
    action: ModuleAction
    changed: tuple[str, ...] = ()
    """Parameter names whose loaded value differs from the wanted one (RELOAD)."""


def module_params_decision(
    desired: Mapping[str, str],
    loaded: ModuleState | None,
    previously_applied: Mapping[str, str] | None = None,
) -> ModuleParamsDecision:
    """Whether the ``metax`` module must be (re)loaded so /sys/module/metax/parameters shows ``desired``.

    A parameter dropped from driver-config (present in ``previously_applied``, absent from ``desired``)
    forces a reload too: only a fresh load brings back the driver's own default, which we cannot know.
    """
    if loaded is None:
        return ModuleParamsDecision(ModuleAction.LOAD)
    changed = {name for name, value in desired.items() if loaded.params.get(name, "").strip() != value}
    changed |= {name for name in (previously_applied or {}) if name not in desired}
    if changed:
        return ModuleParamsDecision(ModuleAction.RELOAD, tuple(sorted(changed)))
    return ModuleParamsDecision(ModuleAction.KEEP)
