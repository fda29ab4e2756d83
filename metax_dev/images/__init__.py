"""The product's container images: definitions (``images/images.toml``) and their build (docs/images.md)."""
