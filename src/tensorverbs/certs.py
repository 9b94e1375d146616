"""Certificates for a secured cluster: a certificate authority and one certificate per task.

Each task's certificate names its host as the cluster spec writes it (a DNS name or an
IP address) in its subjectAltName, so clients verify a task against the address they
dial, with no target-name override; it serves both as the task's server certificate and
as its client certificate for mutual TLS. Keys are ECDSA P-256, written readable by
their owner only.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .cluster import ClusterSpec, TaskName
from .errors import InvalidArgumentError

CA_CERT, CA_KEY = "ca.pem", "ca.key"


@dataclass(frozen=True)
class Issued:
    """A PEM certificate and its PEM private key."""

    cert: bytes
    key: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tensorverbs"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _sign(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, days: int,
          extensions: list[tuple[x509.ExtensionType, bool]]) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=days)))
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Issued:
    return Issued(cert.public_bytes(serialization.Encoding.PEM),
                  key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))


def make_ca(days: int = 365) -> Issued:
    """A new self-signed certificate authority."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = "tensorverbs job CA"
    cert = _sign(name, key, _name(name), key, days, [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                       key_agreement=False, encipher_only=False, decipher_only=False), True),
    ])
    return _pem(cert, key)


def issue(ca: Issued, task: TaskName, host: str, days: int = 365) -> Issued:
    """A certificate of ``ca`` for ``task`` on ``host``, good for serving and calling."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise InvalidArgumentError("the CA key is not an elliptic-curve key (tensorverbs certs makes those)")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _sign(str(task), key, ca_cert.subject, ca_key, days, [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.SubjectAlternativeName([_san(host)]), False),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), False),
    ])
    return _pem(cert, key)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write a new file (never replacing one) with permissions ``mode``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def task_files(directory: str | os.PathLike, task: TaskName) -> tuple[Path, Path]:
    """(certificate, key) paths of ``task`` in ``directory``."""
    stem = Path(directory) / f"{task.job}-{task.task}"
    return stem.with_suffix(".pem"), stem.with_suffix(".key")


def write_cluster(directory: str | os.PathLike, cluster: ClusterSpec, days: int = 365) -> list[Path]:
    """Make a CA and a certificate for every task of ``cluster`` in ``directory``
    (created if needed; existing files are never replaced); the paths written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ca = make_ca(days)
    written = [out / CA_CERT, out / CA_KEY]
    _write(written[0], ca.cert, 0o644)
    _write(written[1], ca.key, 0o600)
    for task in cluster.tasks():
        host = cluster.address(task).rsplit(":", 1)[0].strip("[]")
        issued = issue(ca, task, host, days)
        cert_path, key_path = task_files(out, task)
        _write(cert_path, issued.cert, 0o644)
        _write(key_path, issued.key, 0o600)
        written += [cert_path, key_path]
    return written
