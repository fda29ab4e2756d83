"""The ``metax-vfio-config`` ConfigMap (R-VFIO, §3.2.6.1): its data form, parsed and rendered in one place.

The seed names the ConfigMap and says administrators edit it with ``kubectl edit`` but never prints its
data. We keep the chart's own shape, so what an administrator sees is what they wrote in values.yaml: one
key, ``vfioConfig``, holding the YAML list ``[{nodeName: <regex>, gpus: "0,1" | all}]``, in the spec's order
(the first matching entry wins).

This module is the one owner of that format (issue 20): the operator renders the ConfigMap's data with
`render` (through `metax_core.cluster.configmaps`), vfio-manager reads it with `parse`, which goes through the
project's limited YAML loader (`metax_core.spec.text`, like every user input) and refuses a bad entry naming
its path (the agent then keeps the last valid selection). Nothing else spells the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import yaml

from metax_core.errors import FieldError, InvalidSpec
from metax_core.spec import text, vfio_config
from metax_core.spec.model import VfioConfigEntry
from metax_core.wire import meta

NAME = meta.VFIO_CONFIG_MAP
"""The ConfigMap's name, in the operator's namespace."""
KEY = "vfioConfig"
"""Its one data key."""


def render(entries: Sequence[VfioConfigEntry]) -> dict[str, str]:
    """ConfigMap ``data`` for the spec's ``vfioManager.vfioConfig``."""
    listed = [{"nodeName": e.node_name, "gpus": e.gpus} for e in entries]
    return {KEY: yaml.safe_dump(listed, default_flow_style=False, sort_keys=False)}


def parse(data: Mapping[str, object] | None) -> tuple[VfioConfigEntry, ...]:
    """The entries, or InvalidSpec listing every problem (``vfioConfig[1].gpus: ...``)."""
    data = data or {}
    errors = [FieldError(str(k), f"unknown key; supported: {KEY}") for k in sorted(map(str, data)) if k != KEY]
    raw = data.get(KEY)
    if isinstance(raw, str):
        try:
            raw = text.load_value(raw, KEY)
        except text.TextError as exc:
            where = f"line {exc.line}: " if exc.line is not None else ""
            raise InvalidSpec([*errors, FieldError(KEY, f"is not valid YAML: {where}{exc.message}")]) from None
    if isinstance(raw, Mapping) and list(raw) == [KEY]:
        raw = raw[KEY]
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise InvalidSpec([*errors, FieldError(KEY, "must be a list of {nodeName, gpus} entries")])
    entries: list[VfioConfigEntry] = []
    for i, item in enumerate(raw):
        path = f"{KEY}[{i}]"
        if not isinstance(item, Mapping):
            errors.append(FieldError(path, "must be a mapping like {nodeName: node-1, gpus: '0,1'}"))
            continue
        errors += [
            FieldError(f"{path}.{k}", "unknown field; supported: nodeName, gpus")
            for k in item
            if k not in ("nodeName", "gpus")
        ]
        name, gpus = item.get("nodeName"), item.get("gpus")
        if not isinstance(name, str):
            errors.append(FieldError(f"{path}.nodeName", "must be a string (a regular expression)"))
            continue
        if isinstance(gpus, int) and not isinstance(gpus, bool):
            gpus = str(gpus)
        if not isinstance(gpus, str):
            errors.append(FieldError(f"{path}.gpus", 'must be "all" or comma-separated GPU indexes like "0,1,2"'))
            continue
        entries.append(VfioConfigEntry(node_name=name, gpus=gpus))
    errors += vfio_config.check_entries(entries, path=KEY)
    if errors:
        raise InvalidSpec(errors)
    return tuple(entries)
