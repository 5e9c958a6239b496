"""Certificates and kubeconfigs for the embedded control plane.

Two CAs: the cluster CA (API server, kubelets and every client of theirs) and an etcd
CA that signs only etcd's own certificate and the API server's etcd client
certificate, so that no kubelet or admin certificate opens etcd (as kubeadm does).
Serving certificates name exactly the addresses they are reached at (loopback for the
control plane, a real node's IP for its kubelet); client certificates name a user
and groups. Everything is written with mode 0600 inside the cluster's state
directory, which ``cluster down`` removes; no key ever leaves it (reports record
paths, never contents).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=30)


def _key() -> ec.EllipticCurvePrivateKey:
    # P-256 keys are generated in microseconds; RSA would cost ~100 ms each.
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _certificate(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, ca: bool) -> x509.CertificateBuilder:
    """Fields every certificate here shares; the caller adds usage extensions and signs."""
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # A little slack for clock differences between processes started seconds apart.
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


#: Where the API server is reached: loopback, and its Service's names and cluster IP (for pods).
APISERVER_HOSTS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "127.0.0.1", "10.0.0.1")
CLUSTER_CA = "ca"
ETCD_CA = "etcd-ca"


@dataclass(frozen=True)
class Identity:
    cert: Path
    key: Path


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


class PKI:
    """Issues everything one cluster needs under ``<state>/pki``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca_cert = root / f"{CLUSTER_CA}.crt"
        self.ca_key_path = root / f"{CLUSTER_CA}.key"
        self.etcd_ca_cert = root / f"{ETCD_CA}.crt"
        self.sa_key = root / "sa.key"
        self.sa_pub = root / "sa.pub"
        self._cas: dict[str, tuple[x509.Certificate, ec.EllipticCurvePrivateKey]] = {}

    def create(self) -> None:
        for authority, common_name in ((CLUSTER_CA, "dra-harness-ca"), (ETCD_CA, "dra-harness-etcd-ca")):
            self._cas[authority] = self._new_ca(authority, common_name)
        sa = _key()
        _write(self.sa_key, _key_pem(sa))
        _write(
            self.sa_pub,
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )

    def load(self) -> PKI:
        """Read the authorities :meth:`create` wrote, to issue more certificates for a running cluster."""
        for authority in (CLUSTER_CA, ETCD_CA):
            cert = x509.load_pem_x509_certificate((self.root / f"{authority}.crt").read_bytes())
            key = serialization.load_pem_private_key((self.root / f"{authority}.key").read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{self.root / authority}.key: not the EC key this PKI writes")
            self._cas[authority] = (cert, key)
        return self

    def _new_ca(self, authority: str, common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        cert = (
            _certificate(name, name, key, ca=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                    key_encipherment=False, data_encipherment=False, key_agreement=False,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        _write(self.root / f"{authority}.crt", cert.public_bytes(serialization.Encoding.PEM))
        _write(self.root / f"{authority}.key", _key_pem(key))
        return cert, key

    def issue(
        self,
        name: str,
        common_name: str,
        organizations: tuple[str, ...] = (),
        *,
        hosts: tuple[str, ...] = (),
        client: bool = True,
        authority: str = CLUSTER_CA,
    ) -> Identity:
        """A certificate signed by ``authority``: for serving ``hosts`` (IPs or DNS names) when
        given, for client authentication as ``common_name``/``organizations`` when ``client``."""
        ca, ca_key = self._cas[authority]
        key = _key()
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if hosts else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        if not usages:
            raise ValueError(f"certificate {name!r} would be good for nothing: no hosts and no client use")
        builder = _certificate(x509.Name(attrs), ca.subject, key, ca=False).add_extension(
            x509.ExtendedKeyUsage(usages), critical=False
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        identity = self.identity(name)
        _write(identity.cert, cert.public_bytes(serialization.Encoding.PEM))
        _write(identity.key, _key_pem(key))
        return identity

    def identity(self, name: str) -> Identity:
        """Where :meth:`issue` wrote (or will write) ``name``'s certificate and key."""
        return Identity(cert=self.root / f"{name}.crt", key=self.root / f"{name}.key")

    def kubeconfig(self, path: Path, server: str, identity: Identity, cluster: str, user: str) -> Path:
        """A kubeconfig that references (never embeds) the key files."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": cluster, "cluster": {"server": server, "certificate-authority": str(self.ca_cert)}}
            ],
            "users": [
                {"name": user, "user": {"client-certificate": str(identity.cert), "client-key": str(identity.key)}}
            ],
            "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
            "current-context": cluster,
        }
        _write(path, yaml.safe_dump(config, sort_keys=False).encode())
        return path
