"""The embedded cluster's PKI: chains verify, names and usages are right, keys stay private."""

from __future__ import annotations

import stat

import pytest
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dra_harness.providers.embedded.pki import APISERVER_HOSTS, ETCD_CA, PKI


def _load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _usages(cert: x509.Certificate) -> set:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def _ips(cert: x509.Certificate) -> list[str]:
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]


@pytest.fixture
def pki(tmp_path) -> PKI:
    pki = PKI(tmp_path)
    pki.create()
    return pki


def test_issued_certificates_chain_to_the_ca_with_the_right_names(pki):
    server = pki.issue("apiserver", "kube-apiserver", hosts=APISERVER_HOSTS, client=False)
    admin = pki.issue("admin", "admin", ("system:masters",))
    ca = _load(pki.ca_cert)
    for ident in (server, admin):
        _load(ident.cert).verify_directly_issued_by(ca)
        assert stat.S_IMODE(ident.key.stat().st_mode) == 0o600
    srv = _load(server.cert)
    assert "127.0.0.1" in _ips(srv)
    assert _usages(srv) == {ExtendedKeyUsageOID.SERVER_AUTH}
    adm = _load(admin.cert)
    assert adm.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert _usages(adm) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_etcd_certificates_come_from_a_ca_of_their_own_that_signs_no_other(pki):
    etcd = _load(pki.issue("etcd", "etcd", hosts=("127.0.0.1", "localhost"), authority=ETCD_CA).cert)
    etcd_ca = _load(pki.etcd_ca_cert)
    etcd.verify_directly_issued_by(etcd_ca)
    # Its own peer: serves and authenticates with the same certificate.
    assert _usages(etcd) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert _ips(etcd) == ["127.0.0.1"]
    # Negative control: a cluster-CA client certificate (a kubelet's, the admin's) does not chain to etcd's CA.
    admin = _load(pki.issue("admin", "admin", ("system:masters",)).cert)
    with pytest.raises((ValueError, InvalidSignature)):
        admin.verify_directly_issued_by(etcd_ca)


def test_a_kubelet_serving_certificate_names_the_nodes_ip_and_name(pki):
    cert = _load(pki.issue("kubelet-n-serving", "system:node:n", ("system:nodes",), hosts=("198.18.0.5", "n"), client=False).cert)
    cert.verify_directly_issued_by(_load(pki.ca_cert))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert _ips(cert) == ["198.18.0.5"] and sans.get_values_for_type(x509.DNSName) == ["n"]
    assert _usages(cert) == {ExtendedKeyUsageOID.SERVER_AUTH}


def test_a_certificate_for_no_use_is_refused(pki):
    with pytest.raises(ValueError, match="good for nothing"):
        pki.issue("x", "x", client=False)


def test_the_kubeconfig_references_keys_and_never_embeds_them(pki, tmp_path):
    admin = pki.issue("admin", "admin", ("system:masters",))
    path = pki.kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:6443", admin, "c", "u")
    text = path.read_text()
    assert "PRIVATE KEY" not in text and "client-key-data" not in text
    assert yaml.safe_load(text)["users"][0]["user"]["client-key"] == str(admin.key)
