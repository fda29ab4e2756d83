"""Image references and the registry rule (issue 39 item 5; R-RELEASE).

- a registry with a port, a path, ``localhost`` or an IPv6 literal renders ``<registry>/<image>:<version>`` as
  given, and a release's digest pins it (``…:<version>@sha256:…``) in the operator's rendered workloads;
- an empty registry, or one whose first component is no host (Docker Hub's reading), is refused naming the field
  and an example; a scheme or a trailing slash too;
- the digests the chart hands the operator (``METAX_IMAGE_DIGESTS``) round-trip through the one encoder and
  decoder, and bad entries are refused naming the entry.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from metax_core.cluster import image_refs, render_settings, workloads
from metax_core.errors import InvalidSpec
from metax_core.spec import names, validation

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    "registry",
    [
        "registry.example.com/metax",
        "registry.example.com:5000/metax/gpu",
        "127.0.0.1:5000/metax",
        "localhost/metax",
        "localhost:5000",
        "[::1]:5000/metax",
        "docker.io/metaxtech",
    ],
)
def test_a_registry_with_a_host_is_accepted_and_used_as_given(registry: str) -> None:
    assert names.registry_problem(registry) is None
    assert image_refs.reference(registry, "metax-gpu-label", "0.1.0") == f"{registry}/metax-gpu-label:0.1.0"
    pinned = image_refs.reference(registry, "metax-gpu-label", "0.1.0", DIGEST)
    assert pinned == f"{registry}/metax-gpu-label:0.1.0@{DIGEST}"


@pytest.mark.parametrize(
    ("registry", "says"),
    [
        ("", "is required"),
        ("metax", '"metax" alone would be read as a Docker Hub name'),
        ("metax/project", '"metax" alone would be read as a Docker Hub name'),
        ("https://registry.example.com/metax", "no scheme"),
        ("registry.example.com/metax/", "no trailing /"),
        ("Registry.Example.com/METAX", "must be a registry path"),
    ],
)
def test_a_registry_that_is_no_registry_host_is_refused_with_the_field_and_an_example(registry: str, says: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        validation.parse({"registry": registry, "driver": {"payload": {"version": "2.32.0"}}})
    (message,) = [str(e) for e in refused.value.errors if e.path == "registry"]
    assert says in message and names.REGISTRY_EXAMPLE in message


def test_the_rendered_workloads_pin_every_image_the_release_pinned() -> None:
    s = validation.parse({"registry": "127.0.0.1:5000/metax", "driver": {"payload": {"version": "2.32.0"}}})
    label = "metax-gpu-label"
    settings = render_settings.RenderSettings(image_digests={label: DIGEST})
    images = {
        c["image"]
        for o in workloads.render(s, settings).objects
        if "template" in o.get("spec", {})
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert any(i.startswith(f"127.0.0.1:5000/metax/{label}:") and i.endswith(f"@{DIGEST}") for i in images)
    # what the release did not pin stays a tag (an image added after the release, or a release without digests)
    unpinned = {i for i in images if "@" not in i}
    assert unpinned and all(i.startswith("127.0.0.1:5000/metax/") for i in unpinned)


_NAMES = st.from_regex(r"[a-z0-9]+(-[a-z0-9]+){0,3}", fullmatch=True)
_DIGESTS = st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True)


@given(st.dictionaries(_NAMES, _DIGESTS, max_size=12))
def test_the_digests_round_trip_through_the_variable(digests: dict[str, str]) -> None:
    assert image_refs.decode_digests(image_refs.encode_digests(digests)) == digests


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"metax-gpu-label": "sha256:abc"}', "METAX_IMAGE_DIGESTS.metax-gpu-label"),
        ('{"metax-gpu-label": "md5:' + "a" * 32 + '"}', "METAX_IMAGE_DIGESTS.metax-gpu-label"),
        ('{"Bad Name": "' + DIGEST + '"}', "METAX_IMAGE_DIGESTS"),
        ('["metax-gpu-label"]', "METAX_IMAGE_DIGESTS"),
        ("{not json", "METAX_IMAGE_DIGESTS"),
    ],
)
def test_a_bad_digest_variable_is_refused_naming_the_entry(text: str, path: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        image_refs.decode_digests(text)
    assert [e.path for e in refused.value.errors] == [path]


def test_no_variable_means_no_pins() -> None:
    assert image_refs.decode_digests("") == {}
