"""The container-edit socket's format (`metax_core.runtime.edit_wire`): what the wrapper sends and the service
answers round-trips; a header that is not ours is refused with what is wrong; limits hold.

The C wrapper's side of the same bytes runs against the real service in tests/runtime/test_wrapper_runc.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metax_core.errors import InvalidSpec
from metax_core.runtime import edit_wire

_LINE = st.text(st.characters(blacklist_characters="\n\0", blacklist_categories=("Cs",)), min_size=1, max_size=60)


@given(
    cid=_LINE,
    bundle=_LINE,
    root=st.one_of(st.none(), _LINE.filter(lambda r: r != edit_wire.NO_ROOT)),
    body=st.binary(max_size=2000),
)
def test_request_round_trip(cid: str, bundle: str, root: str | None, body: bytes) -> None:
    request = edit_wire.Request(cid, bundle, root, body)
    assert edit_wire.parse_request(edit_wire.render_request(request)) == request


def test_header_arrives_in_pieces() -> None:
    data = edit_wire.render_request(edit_wire.Request("c1", "/b", None, b'{"a":1}\n\n{}'))
    assert edit_wire.split_header(data[:10]) is None
    header, rest = edit_wire.split_header(data) or (b"", b"")
    assert edit_wire.parse_header(header) == edit_wire.Header("c1", "/b", None, 11)
    assert rest == b'{"a":1}\n\n{}'


@given(status=st.sampled_from(edit_wire.Status), body=st.binary(max_size=500))
def test_response_round_trip(status: edit_wire.Status, body: bytes) -> None:
    got = edit_wire.parse_response(edit_wire.render_response(edit_wire.Response(status, body)))
    assert got.status is status
    if status is edit_wire.Status.EDITED:
        assert got.body == body
    elif status is edit_wire.Status.UNCHANGED:
        assert got.body == b""
    else:  # one line, for the container's start error
        assert b"\n" not in got.body and got.body


def test_a_refusal_is_one_line() -> None:
    raw = edit_wire.render_response(edit_wire.Response(edit_wire.Status.REFUSED, b"no match\n  for maca-3"))
    assert raw == b"metax-edit/1 refused 19\nno match for maca-3"


@pytest.mark.parametrize(
    ("header", "why"),
    [
        (b"GET / HTTP/1.1\n", "must start with"),
        (b"metax-edit/1\nid a\nbundle /b\nroot -\n", "missing field"),
        (b"metax-edit/1\nid a\nid b\nbundle /b\nroot -\nlength 1\n", "given twice"),
        (b"metax-edit/1\nid a\nbundle /b\nroot -\nlength x\n", "length must be"),
        (b"metax-edit/1\nid a\nbundle /b\nroot -\nlength 99999999999\n", "length must be"),
        (b"metax-edit/1\nname a\n", "unknown field"),
    ],
)
def test_foreign_headers_are_refused_with_why(header: bytes, why: str) -> None:
    with pytest.raises(InvalidSpec, match=why):
        edit_wire.parse_header(header)


def test_an_endless_header_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="no end of header"):
        edit_wire.split_header(b"x" * (edit_wire.MAX_HEADER + 1))


def test_a_value_with_a_newline_cannot_be_sent() -> None:
    with pytest.raises(ValueError, match="id must be"):
        edit_wire.render_request(edit_wire.Request("a\nlength 0", "/b", None, b""))
