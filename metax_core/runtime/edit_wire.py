"""The message format on the container-edit socket (R-MACA): what the runtime wrapper sends, what the edit
service answers. One owner: the wrapper (C, ``services/container_edit/wrapper.c``) writes and reads exactly
these bytes, the service (Python) parses and renders them here, and ``tests/unit/test_edit_wire.py`` round
trips them (``tests/integration/runtime`` runs the real wrapper against the real service).

Why a header of lines and a length-prefixed body, not JSON around JSON: the wrapper is a small static C program
that must not parse JSON to frame a message; it writes its fields as ``key value`` lines (no value may hold a
newline: the wrapper refuses such a container id or path) and then the container's ``config.json`` as it is.

Request (wrapper → service), one per connection::

    metax-edit/1\\n
    id <container id>\\n
    bundle <absolute bundle path>\\n
    root <runc --root, or "-" when the default is used>\\n
    length <bytes of config.json>\\n
    \\n
    <config.json>

Response (service → wrapper)::

    metax-edit/1 <edited|unchanged|refused> <bytes>\\n
    <the edited config.json | nothing | one line saying why, for the container's start error>
"""

from __future__ import annotations

import enum

import attrs

from metax_core.errors import FieldError, InvalidSpec

MAGIC = "metax-edit/1"
MAX_HEADER = 8192
"""Bytes a request header may take (its four fields are an id and two paths)."""
MAX_BODY = 16 << 20
"""Bytes a config.json may take (a real one is a few KiB; 16 MiB stops a runaway, not a container)."""
NO_ROOT = "-"
_FIELDS = ("id", "bundle", "root", "length")


class Status(enum.Enum):
    EDITED = "edited"
    """The body is the edited config.json; the wrapper writes it back before it runs runc."""
    UNCHANGED = "unchanged"
    """Nothing to do for this container (not a MetaX one, or nothing asked): runc runs on the original."""
    REFUSED = "refused"
    """The body is why; the wrapper prints it on stderr and fails the create."""


@attrs.frozen
class Request:
    container_id: str
    bundle: str
    root: str | None
    """runc's ``--root`` as the runtime passed it (None: runc's default), for the in-use record."""
    config: bytes


@attrs.frozen
class Response:
    status: Status
    body: bytes = b""

    @property
    def message(self) -> str:
        return self.body.decode("utf-8", "replace")


def _bad(message: str) -> InvalidSpec:
    return InvalidSpec([FieldError("request", message)])


def render_request(request: Request) -> bytes:
    values = (request.container_id, request.bundle, request.root or NO_ROOT)
    for name, value in zip(("id", "bundle", "root"), values, strict=True):
        if not value or "\n" in value or "\0" in value:
            raise ValueError(f"{name} must be a non-empty line, got {value!r}")
    lines = [MAGIC, *(f"{k} {v}" for k, v in zip(_FIELDS, (*values, str(len(request.config))), strict=True))]
    return ("\n".join(lines) + "\n\n").encode() + request.config


def split_header(buffer: bytes) -> tuple[bytes, bytes] | None:
    """(header, the bytes after it) once ``buffer`` holds a whole header; None while more is needed.

    InvalidSpec when the header is longer than `MAX_HEADER` (the sender is not our wrapper)."""
    end = buffer.find(b"\n\n")
    if end < 0:
        if len(buffer) > MAX_HEADER:
            raise _bad(f"no end of header within {MAX_HEADER} bytes")
        return None
    if end > MAX_HEADER:
        raise _bad(f"header longer than {MAX_HEADER} bytes")
    return buffer[: end + 1], buffer[end + 2 :]


@attrs.frozen
class Header:
    container_id: str
    bundle: str
    root: str | None
    length: int


def parse_header(header: bytes) -> Header:
    """The fields of a request header (`split_header`'s first part); InvalidSpec naming what is wrong."""
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(f"header is not UTF-8: {exc}") from None
    lines = text.rstrip("\n").split("\n")
    if not lines or lines[0] != MAGIC:
        raise _bad(f"must start with {MAGIC!r}, got {lines[0][:40]!r}")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        if key not in _FIELDS:
            raise _bad(f"unknown field {key!r}; fields are {', '.join(_FIELDS)}")
        if key in fields:
            raise _bad(f"field {key!r} given twice")
        if not value:
            raise _bad(f"field {key!r} is empty")
        fields[key] = value
    missing = [k for k in _FIELDS if k not in fields]
    if missing:
        raise _bad(f"missing field(s) {', '.join(missing)}")
    if not fields["length"].isdigit() or int(fields["length"]) > MAX_BODY:
        raise _bad(f"length must be a number of bytes <= {MAX_BODY}, got {fields['length']!r}")
    root = fields["root"]
    return Header(fields["id"], fields["bundle"], None if root == NO_ROOT else root, int(fields["length"]))


def parse_request(data: bytes) -> Request:
    """A whole request (header and body) as `render_request` wrote it."""
    parts = split_header(data)
    if parts is None:
        raise _bad("incomplete header")
    header = parse_header(parts[0])
    if len(parts[1]) != header.length:
        raise _bad(f"body is {len(parts[1])} bytes, the header says {header.length}")
    return Request(header.container_id, header.bundle, header.root, parts[1])


def render_response(response: Response) -> bytes:
    body = response.body
    if response.status is Status.REFUSED:  # one line: it becomes the container's start error
        body = b" ".join(body.split()) or b"refused"
    if response.status is Status.UNCHANGED:
        body = b""
    return f"{MAGIC} {response.status.value} {len(body)}\n".encode() + body


def parse_response(data: bytes) -> Response:
    """A response as `render_response` wrote it (what the wrapper reads; tests read it with this)."""
    line, newline, body = data.partition(b"\n")
    words = line.decode("utf-8", "replace").split(" ")
    if not newline or len(words) != 3 or words[0] != MAGIC or not words[2].isdigit():
        raise _bad(f"not a {MAGIC} response: {line[:60]!r}")
    try:
        status = Status(words[1])
    except ValueError:
        raise _bad(f"unknown status {words[1]!r}") from None
    if len(body) != int(words[2]):
        raise _bad(f"body is {len(body)} bytes, the response says {words[2]}")
    return Response(status, body)
