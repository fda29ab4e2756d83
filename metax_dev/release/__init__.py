"""A release an administrator installs from a registry: every image for each platform as one OCI image index, the
chart as an OCI artifact pinned to those indexes by digest, an SBOM per image and a checksum file; and the same
as one air-gapped bundle that a private registry is loaded from (issue 39, R-RELEASE; docs/images.md).

- `target`: where a release goes (a registry path, its credentials and CA) and the tools' flags for it;
- `layout`: the built images of every platform as one OCI layout, one image index per image (Debian's buildah);
- `publish`: push the layout (skopeo) and the chart (helm package, helm push), write the release's files;
- `bundle`: the air-gapped archive, and loading it into a registry (``./run mirror``).

Development tooling: it runs where the images are built (``./run release``, ``./run bundle``); what it runs
underneath (skopeo, helm) is printed, so a site without this repository can load a bundle by hand.
"""
