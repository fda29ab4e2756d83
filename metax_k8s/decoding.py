"""Decoding the API server's JSON: whole, or only the fields a reader keeps (`metax_core.ports.cluster.Fields`).

Why a module of its own: the operator's caches read a dozen fields of each of 35,000 pods at 5,000 nodes, and a
watched pod is 8 KiB of JSON, most of it the spec and the managed fields the operator never reads; decoding all
of it was a quarter of the operator's CPU in an install (py-spy, issue 43 item 7), and every event a burst of
short-lived dicts. msgspec decodes a `typing.TypedDict` shape straight from the bytes and skips the rest without
building it: about five times faster on a pod, and nothing to collect afterwards. `prune` gives the in-memory
server the same result from an object it holds, so both adapters hand a reader the same dicts.

An object that does not fit its shape (a value of another type than declared: a server we have not seen, a field
that changed type) is decoded whole instead, logged once per shape: the reader's own code then meets the whole
object, as it did before shapes, and nothing is lost.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from typing import Any, Generic, TypedDict, TypeVar

import msgspec

from metax_core.ports.cluster import Fields

log = logging.getLogger(__name__)


Item = TypeVar("Item")


class _Page(TypedDict, Generic[Item], total=False):
    metadata: dict[str, Any]  # resourceVersion and continue: a few bytes, kept whole
    items: list[Item] | None


class _Event(TypedDict, Generic[Item]):
    type: str
    object: Item


@functools.cache
def _decoders(fields: Fields) -> tuple[msgspec.json.Decoder[Any], msgspec.json.Decoder[Any]]:
    """A list page's decoder and a watch event's, for objects of ``fields`` (made once per shape)."""
    return msgspec.json.Decoder(_Page[fields]), msgspec.json.Decoder(_Event[fields])  # type: ignore[valid-type]


_warned: set[Fields] = set()
_warned_lock = threading.Lock()


def _misfit(fields: Fields, exc: msgspec.ValidationError) -> None:
    with _warned_lock:
        first = fields not in _warned
        _warned.add(fields)
    if first:
        log.warning(
            "an object did not fit the fields kept of it (%s: %s); such objects are decoded whole", fields.__name__, exc
        )


def whole(data: bytes) -> Any:
    """The JSON document ``data`` (an empty answer: ``{}``)."""
    return json.loads(data) if data else {}


def page(data: bytes, fields: Fields | None) -> Any:
    """A list answer: every item with only ``fields`` (whole without ``fields``, or when one item does not fit)."""
    if fields is None or not data:
        return whole(data)
    try:
        return _decoders(fields)[0].decode(data)
    except msgspec.ValidationError as exc:
        _misfit(fields, exc)
        return whole(data)


def event(line: bytes, fields: Fields | None) -> Any:
    """One line of a watch: ``{"type": ..., "object": ...}``, the object with only ``fields``. An ``ERROR`` event's
    object is a Status, not the watched kind: always whole."""
    if fields is None:
        return json.loads(line)
    try:
        decoded = _decoders(fields)[1].decode(line)
    except msgspec.ValidationError as exc:
        decoded = json.loads(line)
        if decoded.get("type") != "ERROR":  # a Status never fits a watched kind's shape: no news
            _misfit(fields, exc)
        return decoded
    return json.loads(line) if decoded.get("type") == "ERROR" else decoded


def prune(obj: Any, fields: Fields | None) -> Any:
    """``obj`` (a decoded object) with only ``fields``, as `page` and `event` would have decoded it; whole when it does
    not fit. What the in-memory server hands out, so that both adapters give a reader the same dicts."""
    if fields is None:
        return obj
    try:
        return msgspec.convert(obj, fields)
    except msgspec.ValidationError as exc:
        _misfit(fields, exc)
        return obj
