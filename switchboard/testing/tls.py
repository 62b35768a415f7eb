"""Real TLS on 127.0.0.1 for tests: one throwaway CA per run and a certificate for the loopback names,
so the stand-in providers speak HTTPS and the production client verifies them as it would a real API.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from switchboard.outbound import CONNECT_TIMEOUT, MAX_RESPONSE_BYTES, TOTAL_TIMEOUT, Outbound


@dataclass(frozen=True)
class LoopbackTLS:
    """The server side (for a stand-in) and the client side (trusting only the test CA)."""

    server: ssl.SSLContext
    client: ssl.SSLContext
    # The CA certificate as a PEM file: a `switchboard serve` subprocess trusts it through
    # SSL_CERT_FILE, since it cannot be handed an SSLContext.
    ca_file: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_tls() -> LoopbackTLS:
    """A fresh CA and a server certificate for 127.0.0.1, ::1 and localhost, valid for a day."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("switchboard test CA"))
        .issuer_name(_name("switchboard test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                    x509.DNSName("localhost"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder = Path(tempfile.mkdtemp(prefix="sbtls"))
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (folder / "ca.pem").write_bytes(ca_pem)
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    client = ssl.create_default_context(cadata=ca_pem.decode())
    return LoopbackTLS(server=server, client=client, ca_file=folder / "ca.pem")


_TLS: LoopbackTLS | None = None


def tls() -> LoopbackTLS:
    """The run's CA, made on first use (key generation is the slow part)."""
    global _TLS
    if _TLS is None:
        _TLS = make_tls()
    return _TLS


def guarded_client(
    allow_cidrs: str = "127.0.0.0/8",
    allow_http: bool = True,
    *,
    connect_timeout: float = CONNECT_TIMEOUT,
    total_timeout: float = TOTAL_TIMEOUT,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
) -> Outbound:
    """The production outbound client, trusting the test CA (the stand-ins speak real TLS).

    ``allow_cidrs`` is the comma-separated form of ``SWITCHBOARD_OUTBOUND_ALLOW_CIDRS``: the stand-ins
    listen on 127.0.0.1, which the client refuses unless it is allowed here.
    """
    nets = [ipaddress.ip_network(c.strip()) for c in allow_cidrs.split(",") if c.strip()]
    return Outbound(
        allow_http=allow_http,
        allow_cidrs=nets,
        ssl_context=tls().client,
        connect_timeout=connect_timeout,
        total_timeout=total_timeout,
        max_response_bytes=max_response_bytes,
    )
