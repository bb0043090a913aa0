"""A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1/localhost, a client
certificate, all made with `cryptography` in a temporary directory (nothing leaves the test)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_client_cert: Path   # signed by another CA: a server checking clients refuses it
    other_client_key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key, path: Path) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def _cert(subject: str, key, issuer: str, issuer_key, *, ca: bool, usage=None, san=None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(folder: Path) -> Pki:
    """CA → server (SAN 127.0.0.1, localhost) and client certificates, PEM files in ``folder``."""
    def key():
        return ec.generate_private_key(ec.SECP256R1())

    ca_key, other_ca_key, server_key, client_key, other_key = key(), key(), key(), key(), key()
    ca = _cert("test CA", ca_key, "test CA", ca_key, ca=True)
    server = _cert("render-service", server_key, "test CA", ca_key, ca=False, usage=ExtendedKeyUsageOID.SERVER_AUTH,
                   san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    client = _cert("router", client_key, "test CA", ca_key, ca=False, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    other = _cert("stranger", other_key, "other CA", other_ca_key, ca=False, usage=ExtendedKeyUsageOID.CLIENT_AUTH)

    def pem(cert: x509.Certificate, name: str) -> Path:
        path = folder / name
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    return Pki(ca=pem(ca, "ca.pem"), server_cert=pem(server, "server.pem"),
               server_key=_write_key(server_key, folder / "server.key"), client_cert=pem(client, "client.pem"),
               client_key=_write_key(client_key, folder / "client.key"), other_client_cert=pem(other, "other.pem"),
               other_client_key=_write_key(other_key, folder / "other.key"))
