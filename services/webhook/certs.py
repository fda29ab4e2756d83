"""The webhook's own TLS material: a CA, a serving certificate it signs, and when to renew either.

Why it exists: the API server calls the webhook over TLS and trusts only the ``caBundle`` of the webhook
configuration; requiring cert-manager for that would be one more thing to install. So the operator keeps a
small CA of its own (in a Secret, `services.webhook.store`), issues the serving certificate for its Service's
DNS names, and renews it when a third of its lifetime is left (the CA when a third of its own is left; the
old CA stays in ``caBundle`` until it expires, so a certificate issued by either is trusted meanwhile).

Pure apart from key generation: the clock is always a parameter.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME_FACTOR = 10
"""The CA lives this many serving-certificate lifetimes."""
RENEW_WHEN_LEFT = 1 / 3
"""Renew a certificate when this fraction of its lifetime is left."""
_BACKDATE = dt.timedelta(minutes=5)
"""notBefore a little in the past: the API server's clock may be behind ours."""


@attrs.frozen
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert: bytes
    key: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert)


@attrs.frozen
class Material:
    """Everything the webhook's Secret holds."""

    ca: KeyPair
    serving: KeyPair
    previous_ca: bytes = b""
    """The CA before the last CA renewal, trusted until it expires (empty: none)."""

    def ca_bundle(self, now: dt.datetime) -> bytes:
        """What the webhook configuration's caBundle must hold: the CA, and the previous one while valid."""
        bundle = self.ca.cert
        if self.previous_ca and not expired(self.previous_ca, now):
            bundle += self.previous_ca
        return bundle


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(common_name: str, now: dt.datetime, lifetime: dt.timedelta) -> KeyPair:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def issue(ca: KeyPair, hosts: Sequence[str], now: dt.datetime, lifetime: dt.timedelta) -> KeyPair:
    """A serving certificate for ``hosts`` (DNS names or IP addresses), signed by ``ca``."""
    ca_cert = ca.certificate
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the webhook CA key must be an EC key")
    key = _key()
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(min(now + lifetime, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def expired(cert_pem: bytes, now: dt.datetime) -> bool:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc <= now


def renewal_due(cert_pem: bytes, now: dt.datetime) -> bool:
    """True when less than `RENEW_WHEN_LEFT` of the certificate's lifetime is left (or it is not yet valid)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now < start or (end - now) < (end - start) * RENEW_WHEN_LEFT


def covers(cert_pem: bytes, hosts: Sequence[str]) -> bool:
    """Whether the certificate names every host (a Service rename or a new URL needs a new certificate)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    present = {str(n) for n in san.get_values_for_type(x509.DNSName)}
    present |= {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return all(str(h) in present for h in hosts)


def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    ca = x509.load_pem_x509_certificate(ca_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except Exception:  # InvalidSignature, a key type mismatch...: all mean "not signed by"
        return False
    return True


def renew(
    current: Material | None,
    hosts: Sequence[str],
    now: dt.datetime,
    lifetime: dt.timedelta,
    *,
    force: bool = False,
    force_ca: bool = False,
) -> Material | None:
    """New material when something is due (or ``force``), else None.

    The CA is replaced when missing, expired or due, or ``force_ca`` (the old one kept as ``previous_ca``);
    the serving certificate when the CA changed, it is due, it lacks a host, or ``force``.
    """
    ca = current.ca if current else None
    previous = current.previous_ca if current else b""
    if ca is None or force_ca or renewal_due(ca.cert, now):
        previous = ca.cert if ca is not None and not expired(ca.cert, now) else b""
        ca = new_ca("metax-operator-webhook-ca", now, lifetime * CA_LIFETIME_FACTOR)
    serving = current.serving if current else None
    if (
        force
        or serving is None
        or ca is not (current.ca if current else None)
        or renewal_due(serving.cert, now)
        or not covers(serving.cert, hosts)
        or not signed_by(serving.cert, ca.cert)
    ):
        return Material(ca=ca, serving=issue(ca, hosts, now, lifetime), previous_ca=previous)
    return None
