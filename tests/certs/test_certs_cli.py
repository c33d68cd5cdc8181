"""``tessera certs files`` against real files: create, keep, renew keeping the CA, refuse."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs.material import signed_by
from tessera.cli import main

SERVICE_NAMES = {
    "tessera-webhook",
    "tessera-webhook.tessera-system",
    "tessera-webhook.tessera-system.svc",
    "tessera-webhook.tessera-system.svc.cluster.local",
}


def certs_files(tmp_path: Path, *extra: str) -> int:
    return main(["certs", "files", f"--out={tmp_path / 'leaf'}", f"--ca-dir={tmp_path / 'ca'}",
                 *extra])


def serve(tmp_path: Path, *extra: str) -> int:
    return certs_files(tmp_path, "--service=tessera-webhook", "--namespace=tessera-system",
                       *extra)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def snapshot(tmp_path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tmp_path)): p.read_bytes()
            for p in sorted(tmp_path.rglob("*")) if p.is_file()}


@pytest.fixture(autouse=True)
def _no_ambient_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TESSERA_NAMESPACE", raising=False)


def test_the_first_run_writes_a_ca_and_a_serving_cert_for_every_service_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve(tmp_path) == 0
    leaf, ca = load(tmp_path / "leaf/tls.crt"), load(tmp_path / "ca/ca.crt")
    assert signed_by(leaf, ca)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == SERVICE_NAMES
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    # The leaf directory has the layout of a mounted kubernetes.io/tls Secret with ca.crt.
    assert (tmp_path / "leaf/ca.crt").read_bytes() == (tmp_path / "ca/ca.crt").read_bytes()
    for key in (tmp_path / "leaf/tls.key", tmp_path / "ca/ca.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    out = capsys.readouterr().out
    assert "CA" in out and "no CA yet" in out and "no certificate yet" in out


def test_a_second_run_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    assert serve(tmp_path) == 0
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert serve(tmp_path) == 0
    assert snapshot(tmp_path) == before
    assert capsys.readouterr().out.count(": keep: ") == 2


def test_a_leaf_close_to_expiry_is_renewed_by_the_same_ca(tmp_path: Path) -> None:
    assert serve(tmp_path, "--days=20", "--renew-before-days=5") == 0
    ca_before = snapshot(tmp_path / "ca")
    old_leaf = load(tmp_path / "leaf/tls.crt")
    # 20 days left is within the default 30-day threshold of a 365-day policy.
    assert serve(tmp_path) == 0
    new_leaf = load(tmp_path / "leaf/tls.crt")
    assert snapshot(tmp_path / "ca") == ca_before
    assert new_leaf.serial_number != old_leaf.serial_number
    assert signed_by(new_leaf, load(tmp_path / "ca/ca.crt"))
    assert (new_leaf.not_valid_after_utc - new_leaf.not_valid_before_utc).days >= 365


def test_changed_names_reissue_the_leaf_and_keep_the_ca(tmp_path: Path) -> None:
    assert serve(tmp_path) == 0
    ca_before = snapshot(tmp_path / "ca")
    assert serve(tmp_path, "--ip=127.0.0.1") == 0
    san = load(tmp_path / "leaf/tls.crt").extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert snapshot(tmp_path / "ca") == ca_before


def test_a_client_certificate_is_for_client_auth_only(tmp_path: Path) -> None:
    assert certs_files(tmp_path, "--client=tessera-scheduler") == 0
    cert = load(tmp_path / "leaf/tls.crt")
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.subject.rfc4514_string() == "CN=tessera-scheduler"


def test_a_leaf_from_a_foreign_ca_is_replaced_by_one_from_ours(tmp_path: Path) -> None:
    assert main(["certs", "files", f"--out={tmp_path / 'leaf'}",
                 f"--ca-dir={tmp_path / 'other-ca'}", "--dns=x"]) == 0
    assert certs_files(tmp_path, "--dns=x") == 0
    assert signed_by(load(tmp_path / "leaf/tls.crt"), load(tmp_path / "ca/ca.crt"))


def _directory_instead_of_cert(tmp_path: Path) -> None:
    (tmp_path / "leaf/tls.crt").mkdir(parents=True)
    (tmp_path / "leaf/tls.key").write_text("x")


def _key_without_cert(tmp_path: Path) -> None:
    (tmp_path / "leaf").mkdir()
    (tmp_path / "leaf/tls.key").write_text("x")


def _garbage_cert(tmp_path: Path) -> None:
    (tmp_path / "leaf").mkdir()
    (tmp_path / "leaf/tls.crt").write_text("-----BEGIN CERTIFICATE-----\nnope\n")
    (tmp_path / "leaf/tls.key").write_text("x")


def _ca_dir_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "ca").write_text("not a directory")


def _garbage_ca_key(tmp_path: Path) -> None:
    assert certs_files(tmp_path, "--dns=x") == 0
    (tmp_path / "ca/ca.key").write_text("-----BEGIN PRIVATE KEY-----\nbroken\n")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (_directory_instead_of_cert, "is a directory, not a PEM file"),
        (_key_without_cert, "tls.key exists but"),
        (_garbage_cert, "certificate in"),
        (_ca_dir_is_a_file, "cannot read"),
        (_garbage_ca_key, "CA key in"),
    ],
)
def test_unreadable_or_broken_files_are_a_clear_error_and_are_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: object, message: str
) -> None:
    setup(tmp_path)  # type: ignore[operator]
    before = snapshot(tmp_path)
    assert certs_files(tmp_path, "--dns=x") == 1
    err = capsys.readouterr().err
    assert err.startswith("tessera certs files: ")
    assert message in err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "needs at least one DNS name or IP"),
        (("--service=tessera-webhook",), "--service needs --namespace"),
        (("--dns=x", "--days=30", "--renew-before-days=30"), "must be shorter"),
        (("--dns=x", "--days=4000"), "cannot outlive the CA"),
        (("--dns=not_a_name",), "is not a DNS name"),
    ],
)
def test_impossible_requests_are_refused_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    assert certs_files(tmp_path, *args) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ("--ip=300.1.1.1",),
        ("--days=0",),
        ("--days=soon",),
    ],
)
def test_malformed_flags_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    with pytest.raises(SystemExit) as exc:
        certs_files(tmp_path, "--dns=x", *args)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("variable", "flag"),
    [("TESSERA_CERT_DAYS", "--days"), ("TESSERA_CA_DAYS", "--ca-days"),
     ("TESSERA_RENEW_BEFORE_DAYS", "--renew-before-days")],
)
def test_a_malformed_validity_in_the_environment_is_a_usage_error_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    variable: str, flag: str,
) -> None:
    monkeypatch.setenv(variable, "a year")
    with pytest.raises(SystemExit) as exited:
        main(["certs", "files", f"--out={tmp_path / 'leaf'}", f"--ca-dir={tmp_path / 'ca'}"])
    assert exited.value.code == 2
    assert f"argument {flag}: 'a year' is not a whole number" in capsys.readouterr().err
    assert not (tmp_path / "ca").exists()
