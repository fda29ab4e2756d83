"""Reading user text (YAML or JSON) into a document, safely: the one loader for every user-facing input.

Why here, in the core: the CLI (files, stdin), the operator (ConfigMap payloads, the ``--set-file`` toleration
string in values) and the node agents (``driver-config``) all turn text into documents, inside long-running
processes where a hang or a crash takes a cluster component down. Parsing text is pure (no I/O), so it lives
in the core, and every caller gets the same limits; reading the bytes (files, stdin, the API) stays with the
callers, which pass the bytes or text here.

The library is PyYAML's pure-Python loader (already the project's YAML library); what this module adds are
the limits Kubernetes' own YAML handling has, enforced while composing, before any node is built:

* bytes must be UTF-8 (a BOM is allowed) and at most `MAX_BYTES` long;
* nesting deeper than `MAX_DEPTH` is refused (no RecursionError, however deep the input);
* anchors/aliases are refused outright (no "billion laughs": nothing can expand beyond the input's size);
* integers longer than `MAX_INT_DIGITS` digits are refused (Python's own 4,300-digit limit never trips);
* a key given twice is an error (as ``kubectl --validate=strict``), and in documents (`load_document`) every
  mapping key must be a string and only JSON's types exist (a date stays a string, ``!!binary`` is refused);
* in text administrators write by hand (`StrictLoader`), only true/false are booleans, only decimal digits are
  integers, and mapping keys stay the text they are written as.

Every problem is a `TextError` whose ``str`` is one line: ``source:line:column: message``.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from metax_core.errors import MetaxError

MAX_BYTES = 1024 * 1024
"""1 MiB: a ConfigMap's whole data limit; the CR itself is stored in etcd under ~1.5 MiB."""
MAX_DEPTH = 64
"""Nesting levels of mappings and lists. The deepest real input (an affinity) needs about 10."""
MAX_INT_DIGITS = 30
"""Longer than any int64 (19 digits); bounds per field are checked later, with the field's path."""


class TextError(MetaxError):
    """Text that cannot be read as a document: names the source, the position and the problem, on one line."""

    def __init__(self, source: str, message: str, line: int | None = None, column: int | None = None) -> None:
        self.source = source
        self.message = message
        self.line = line
        self.column = column
        where = source
        if line is not None:
            where += f":{line}:{column or 1}"
        super().__init__(f"{where}: {message}")


class _Limit(yaml.MarkedYAMLError):
    """A limit of this module, raised while composing (so it carries a position like any YAML error)."""


class LimitedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader with the limits above. Subclass it to change resolvers (`driver_config` does)."""

    max_depth = MAX_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise _Limit(None, None, "anchors and aliases (*name) are not allowed", event.start_mark)
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if getattr(event, "anchor", None) is not None:
            raise _Limit(None, None, "anchors and aliases (&name) are not allowed", event.start_mark)
        if self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            self._depth += 1
            if self._depth > self.max_depth:
                raise _Limit(None, None, f"nested deeper than {self.max_depth} levels", event.start_mark)
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
        return super().compose_node(parent, index)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(node.value)
        if sum(c.isdigit() for c in text) > MAX_INT_DIGITS:
            raise _Limit(None, None, f"integer longer than {MAX_INT_DIGITS} digits", node.start_mark)
        try:
            return int(super().construct_yaml_int(node))
        except ValueError as exc:
            raise _Limit(None, None, f"not an integer: {text[:40]!r}", node.start_mark) from exc

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(None, None, "expected a mapping", node.start_mark)
        self.flatten_mapping(node)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.mapping_key(key_node)
            try:
                seen = key in result
            except TypeError:
                raise _Limit(None, None, "a mapping key must be a plain value", key_node.start_mark) from None
            if seen:
                raise _Limit(None, None, f"key {_short(key)} appears twice", key_node.start_mark)
            result[key] = self.construct_object(value_node, deep=deep)
        return result

    def mapping_key(self, key_node: Any) -> Any:
        """The key of one mapping entry (a subclass may keep keys as their text)."""
        if not isinstance(key_node, yaml.ScalarNode):
            raise _Limit(None, None, "a mapping key must be a plain value", key_node.start_mark)
        return self.construct_object(key_node, deep=True)


LimitedLoader.add_constructor("tag:yaml.org,2002:int", LimitedLoader.construct_yaml_int)
LimitedLoader.add_constructor("tag:yaml.org,2002:map", LimitedLoader.construct_yaml_map)  # type: ignore[type-var]


class DocumentLoader(LimitedLoader):
    """For JSON-shaped documents (a ClusterOperator, chart values): string keys, JSON's types only."""

    def mapping_key(self, key_node: Any) -> Any:
        key = super().mapping_key(key_node)
        if not isinstance(key, str):
            raise _Limit(None, None, f"key {_short(key)} must be a string (quote it)", key_node.start_mark)
        return key


DocumentLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in LimitedLoader.yaml_implicit_resolvers.items()
}
for _tag in ("binary", "timestamp", "omap", "pairs", "set"):
    DocumentLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", DocumentLoader.construct_undefined)  # type: ignore[type-var]


class StrictLoader(LimitedLoader):
    """For text administrators write by hand (``driver-config``): the limited loader (size, depth, no aliases,
    duplicate keys refused) minus YAML 1.1 guesses, as YAML 1.2 reads it: only true/false are booleans, only
    decimal digits are integers, and mapping keys stay the text they are written as, so a node named ``08``,
    ``1e3``, ``0x1f``, ``true`` or ``null`` keeps its name."""

    def mapping_key(self, key_node: Any) -> Any:
        if not isinstance(key_node, yaml.ScalarNode):
            return super().mapping_key(key_node)
        return str(key_node.value)


StrictLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)\Z"), list("tTfF")
)
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+\Z"), list("-+0123456789"))


def _construct_decimal_int(loader: LimitedLoader, node: yaml.ScalarNode) -> int:
    value = str(loader.construct_scalar(node))
    if not re.fullmatch(r"[-+]?[0-9]{1,30}", value):
        raise yaml.constructor.ConstructorError(
            None, None, f"{value[:40]!r} is not a decimal integer (at most 30 digits)", node.start_mark
        )
    return int(value)


StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_decimal_int)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def decode(data: bytes | str, source: str, *, max_bytes: int = MAX_BYTES) -> str:
    """``data`` as text: at most ``max_bytes``, UTF-8 (BOM allowed); TextError otherwise."""
    size = len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
    if size > max_bytes:
        raise TextError(source, f"is larger than {max_bytes} bytes; refused")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise TextError(
            source, f"is not UTF-8 text (byte 0x{data[exc.start]:02x}); YAML and JSON must be UTF-8", line, column
        ) from None


def _text_error(source: str, text: str, exc: BaseException) -> TextError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        if mark is not None:
            return TextError(source, message, mark.line + 1, mark.column + 1)
        return TextError(source, message)
    if isinstance(exc, yaml.reader.ReaderError):
        position = min(exc.position, len(text))
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        return TextError(source, f"character U+{exc.character:04X} is not allowed in YAML", line, column)
    return TextError(source, " ".join(str(exc).split())[:200] or type(exc).__name__)


def load_all(
    data: bytes | str, source: str, *, loader: type[LimitedLoader] = DocumentLoader, max_bytes: int = MAX_BYTES
) -> list[Any]:
    """Every non-empty document in ``data``; TextError on bad bytes, bad YAML or a limit."""
    text = decode(data, source, max_bytes=max_bytes)
    documents: list[Any] = []
    stream: LimitedLoader | None = None
    try:
        stream = loader(text)
        while stream.check_data():  # type: ignore[no-untyped-call]
            document = stream.get_data()
            if document is not None:
                documents.append(document)
    except (yaml.YAMLError, ValueError, RecursionError, MemoryError) as exc:
        raise _text_error(source, text, exc) from None
    finally:
        if stream is not None:
            stream.dispose()
    return documents


def load_document(data: bytes | str, source: str, *, max_bytes: int = MAX_BYTES) -> Any:
    """Exactly one YAML or JSON document from ``data``, with every limit above."""
    documents = load_all(data, source, max_bytes=max_bytes)
    if len(documents) != 1:
        raise TextError(source, f"must hold exactly one document, found {len(documents)}")
    return documents[0]


def load_value(text: str, source: str, *, loader: type[LimitedLoader] = DocumentLoader) -> Any:
    """One value from a text field (a ConfigMap key, a ``--set-file`` string): empty text is None."""
    documents = load_all(text, source, loader=loader)
    if len(documents) > 1:
        raise TextError(source, f"must hold one document, found {len(documents)}")
    return documents[0] if documents else None
