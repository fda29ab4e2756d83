"""Version parsing, numeric ordering and MXMACA selection by prefix (R-MACA, §3.3.3).

Covered: the four prefixes of §3.3.3 as requests; ``maca`` and ``maca-`` (and other malformed requests)
refused; numeric, not lexical, ordering; prefixes match whole numbers; no match → NoMatchingVersion naming
what is installed; available entries with or without ``maca-`` and with image-tag suffixes; tag versions;
property: resolve returns the maximum of the matching set, and raises exactly when that set is empty.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metax_core import versions
from metax_core.errors import InvalidSpec
from metax_core.versions import NoMatchingVersion, Version

INSTALLED = ["maca-2.18.0.3", "maca-2.18.0.10", "maca-2.9.1.0", "maca-2.18.1.0", "maca-3.0.0.0", "maca-2.1.0.0"]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ("maca-2", "2.18.1.0"),
        ("maca-2.18", "2.18.1.0"),
        ("maca-2.18.0", "2.18.0.10"),
        ("maca-2.18.0.3", "2.18.0.3"),
        ("maca-3", "3.0.0.0"),
        ("maca-2.9", "2.9.1.0"),
        (" maca-2.1 ", "2.1.0.0"),
    ],
)
def test_3_3_3_prefixes(request_: str, expected: str) -> None:
    assert str(versions.resolve(request_, INSTALLED)) == expected


@pytest.mark.parametrize(
    "request_",
    [
        "maca",
        "maca-",
        "  maca-  ",
        "",
        "2.18",
        "MACA-2",
        "maca-2.",
        "maca-.2",
        "maca-2..1",
        "maca-x",
        "maca--1",
        "maca-2.18-rc1",
        "maca-²",
    ],
)
def test_malformed_requests_are_refused(request_: str) -> None:
    with pytest.raises(InvalidSpec, match="METAX_MACA_VERSION: "):
        versions.resolve(request_, INSTALLED)


def test_prefixes_are_whole_numbers_not_characters() -> None:
    # "maca-2.1" must not pick 2.18.x: the second number is 1, not "starts with 1".
    assert str(versions.resolve("maca-2.1", INSTALLED)) == "2.1.0.0"
    with pytest.raises(NoMatchingVersion):
        versions.resolve("maca-2.1", ["maca-2.18.0.3", "maca-2.10.0.0"])


def test_ordering_is_numeric_not_lexical() -> None:
    assert versions.parse("2.18.0") > versions.parse("2.9.9")
    assert versions.parse("2.18.0.10") > versions.parse("2.18.0.9")
    assert str(versions.resolve("maca-2", ["maca-2.9.9", "maca-2.10.0"])) == "2.10.0"
    assert sorted(map(versions.parse, ["2.10", "2.9", "10.0", "2.100"])) == list(
        map(versions.parse, ["2.9", "2.10", "2.100", "10.0"])
    )


def test_no_match_is_an_error_naming_what_is_installed() -> None:
    with pytest.raises(
        NoMatchingVersion, match=r"no installed MXMACA version matches 'maca-4' \(installed: maca-2.18.0.3\)"
    ) as info:
        versions.resolve("maca-4", ["maca-2.18.0.3"])
    assert info.value.request == "maca-4"
    with pytest.raises(NoMatchingVersion, match=r"\(installed: none\)"):
        versions.resolve("maca-2", [])


def test_available_entries_may_be_bare_or_tags_and_junk_is_ignored() -> None:
    available = ["2.18.0.3-ubuntu18.04-amd64", "maca-2.19.0.1", "not-a-version", "maca-"]
    assert str(versions.resolve("maca-2.18", available)) == "2.18.0.3-ubuntu18.04-amd64"
    assert versions.resolve("maca-2", available) == Version((2, 19, 0, 1))


@pytest.mark.parametrize(
    ("text", "numbers", "suffix"),
    [("2.18.0.3", (2, 18, 0, 3), ""), ("v1.2", (1, 2), ""), ("3", (3,), ""), ("2.18.0-rc1", (2, 18, 0), "-rc1")],
)
def test_parse(text: str, numbers: tuple[int, ...], suffix: str) -> None:
    assert versions.parse(text) == Version(numbers, suffix)


@pytest.mark.parametrize("text", ["", "abc", "1..2", ".1", "1.", "1.2 3", "maca-2.18"])
def test_parse_refuses_non_versions(text: str) -> None:
    with pytest.raises(ValueError, match="not a version number"):
        versions.parse(text)
    assert versions.try_parse(text) is None


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("2.18.0.3-ubuntu18.04-amd64", Version((2, 18, 0, 3))),
        ("2.18.0.3", Version((2, 18, 0, 3))),
        ("latest", None),
        ("v2.1", None),
        ("2.18.0.3x", None),
    ],
)
def test_version_of_tag(tag: str, expected: Version | None) -> None:
    assert versions.version_of_tag(tag) == expected


version_numbers = st.lists(st.integers(0, 25), min_size=1, max_size=4).map(tuple)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(version_numbers, max_size=8),
    st.lists(st.integers(0, 25), min_size=1, max_size=3).map(tuple),
    st.booleans(),
)
def test_resolve_returns_the_max_of_the_matching_set(
    installed: list[tuple[int, ...]], prefix: tuple[int, ...], with_maca_prefix: bool
) -> None:
    names = [("maca-" if with_maca_prefix else "") + ".".join(map(str, v)) for v in installed]
    request = "maca-" + ".".join(map(str, prefix))
    matching = [v for v in installed if v[: len(prefix)] == prefix]
    if not matching:
        with pytest.raises(NoMatchingVersion):
            versions.resolve(request, names)
        return
    assert versions.resolve(request, names).numbers == max(matching)
