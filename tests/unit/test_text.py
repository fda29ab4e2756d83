"""The one safe loader (`metax_core.spec.text`): limits, positions, and the two loaders (documents, and the
driver-config variant that keeps keys as written).

Aspects: each limit refuses with a one-line ``source:line:column: message``; valid YAML and JSON load as
their plain values; empty text is None for a value and an error for a document.
"""

from __future__ import annotations

import pytest

from metax_core.spec import text


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff", "src:1:1: is not UTF-8 text (byte 0xff); YAML and JSON must be UTF-8"),
        (b"a: 1\nb: \xc3\x28\n", "src:2:4: is not UTF-8 text (byte 0xc3); YAML and JSON must be UTF-8"),
        (b"a: [" + b"[" * 100, "src:1:67: nested deeper than 64 levels"),
        (b"a: &x 1\nb: *x\n", "src:1:4: anchors and aliases (&name) are not allowed"),
        (b"a: 1\na: 2\n", "src:2:1: key 'a' appears twice"),
        (b"1: x\n", "src:1:1: key 1 must be a string (quote it)"),
        (b"a: !!set {x}\n", "src:1:4: could not determine a constructor for the tag 'tag:yaml.org,2002:set'"),
        (b"x" * (text.MAX_BYTES + 1), "src: is larger than 1048576 bytes; refused"),
        (b"", "src: must hold exactly one document, found 0"),
    ],
)
def test_every_limit_is_one_line_with_its_position(data: bytes, message: str) -> None:
    with pytest.raises(text.TextError) as caught:
        text.load_document(data, "src")
    assert str(caught.value) == message


def test_yaml_and_json_load_as_plain_values() -> None:
    assert text.load_document(b'{"a": [1, "2", null, true]}', "s") == {"a": [1, "2", None, True]}
    assert text.load_document("\ufeffd: 2024-01-01\n", "s") == {"d": "2024-01-01"}
    assert text.load_value("", "s") is None
    assert text.load_value("- a\n- b\n", "s") == ["a", "b"]
