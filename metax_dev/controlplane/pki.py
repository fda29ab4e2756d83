"""A throw-away certificate authority for one test control plane, and kubeconfigs that use it.

Why this module exists: kube-apiserver authenticates clients by certificate and signs
service-account tokens, so every control plane needs its own CA, serving certificates, client
certificates (the ``O=`` of a client certificate is its group, e.g. ``system:masters``) and a
service-account key pair. Everything is ECDSA P-256, valid from an hour ago for a year, written
as PEM files that the Go binaries read. Which certificates a control plane needs, and with which
names, is decided in :mod:`metax_dev.controlplane.components`.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    signing_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    extensions: Sequence[x509.ExtensionType],
) -> x509.Certificate:
    """Sign a certificate: a CA may sign certificates and CRLs, a leaf only signs (ECDSA).

    Basic constraints and key usage are critical; ``extensions`` are added after them, not
    critical.
    """
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    return builder.sign(signing_key, hashes.SHA256())


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path

    def cert_b64(self) -> str:
        return base64.b64encode(self.cert.read_bytes()).decode()

    def key_b64(self) -> str:
        return base64.b64encode(self.key.read_bytes()).decode()


class Pki:
    """A throw-away CA and the certificates and keys one control plane needs."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "metax-test-ca")])
        self._ca_name = name
        self._ca_cert = _certificate(
            name,
            name,
            self._ca_key.public_key(),
            self._ca_key,
            ca=True,
            extensions=[x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key())],
        )
        self.ca = self._write("ca", self._ca_cert, self._ca_key)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        self.sa_key = directory / "sa.key"
        self.sa_key.write_bytes(_key_pem(sa_key))
        self.sa_pub = directory / "sa.pub"
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def _write(
        self,
        stem: str,
        cert: x509.Certificate,
        key: ec.EllipticCurvePrivateKey,
        directory: Path | None = None,
    ) -> KeyPair:
        where = directory or self.dir
        pair = KeyPair(where / f"{stem}.crt", where / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(_key_pem(key))
        pair.key.chmod(0o600)
        return pair

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ips: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        directory: Path | None = None,
    ) -> KeyPair:
        """A new key and a certificate for it signed by the CA, written as ``<stem>.crt/.key``
        (in the CA's directory, or ``directory``: a real node keeps its own)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        extensions: list[x509.ExtensionType] = [
            x509.ExtendedKeyUsage(usages),
            x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
        ]
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if alt_names:
            extensions.append(x509.SubjectAlternativeName(alt_names))
        cert = _certificate(
            x509.Name(attributes),
            self._ca_name,
            key.public_key(),
            self._ca_key,
            ca=False,
            extensions=extensions,
        )
        return self._write(stem, cert, key, directory)


def write_kubeconfig(path: Path, server: str, ca: KeyPair, user: str, creds: KeyPair) -> None:
    """A kubeconfig for ``server`` with the CA and the user's client certificate embedded."""
    # JSON is YAML: client-go and the Python client both read it, and no YAML writer is needed.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "metax-test",
                "cluster": {"server": server, "certificate-authority-data": ca.cert_b64()},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": creds.cert_b64(),
                    "client-key-data": creds.key_b64(),
                },
            }
        ],
        "contexts": [{"name": "metax-test", "context": {"cluster": "metax-test", "user": user}}],
        "current-context": "metax-test",
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
