"""The embedded cluster's PKI: chains verify, names and usages are right, keys stay private."""

from __future__ import annotations

import stat

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dra_harness.local.pki import PKI


def test_issued_certificates_chain_to_the_ca_with_the_right_names(tmp_path):
    pki = PKI(tmp_path)
    pki.create()
    server = pki.issue("apiserver", "kube-apiserver", server=True)
    admin = pki.issue("admin", "admin", ("system:masters",))
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    for ident in (server, admin):
        cert = x509.load_pem_x509_certificate(ident.cert.read_bytes())
        cert.verify_directly_issued_by(ca)
        assert stat.S_IMODE(ident.key.stat().st_mode) == 0o600
    srv = x509.load_pem_x509_certificate(server.cert.read_bytes())
    sans = srv.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    assert ExtendedKeyUsageOID.SERVER_AUTH in srv.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    adm = x509.load_pem_x509_certificate(admin.cert.read_bytes())
    assert adm.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"


def test_the_kubeconfig_references_keys_and_never_embeds_them(tmp_path):
    pki = PKI(tmp_path)
    pki.create()
    admin = pki.issue("admin", "admin", ("system:masters",))
    path = pki.kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:6443", admin, "c", "u")
    text = path.read_text()
    assert "PRIVATE KEY" not in text and "client-key-data" not in text
    assert yaml.safe_load(text)["users"][0]["user"]["client-key"] == str(admin.key)
