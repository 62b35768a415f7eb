from __future__ import annotations

import os

import pytest

from switchboard.vault import EncryptionRequired, Vault, VaultError, binding, generate_key

KEY = os.urandom(32)
AAD = binding("connections", "secret", "cn_1")


def test_round_trip_and_key_id() -> None:
    vault = Vault(KEY)
    blob, key_id = vault.seal("xoxb-123-secret", AAD)
    assert b"xoxb-123-secret" not in blob
    assert key_id == vault.key_id and key_id.startswith("k_")
    assert vault.open(blob, key_id, AAD) == "xoxb-123-secret"


def test_each_seal_is_fresh() -> None:
    vault = Vault(KEY)
    assert vault.seal("same", AAD)[0] != vault.seal("same", AAD)[0]


def test_wrong_key_fails_loudly() -> None:
    blob, key_id = Vault(KEY).seal("s3cret", AAD)
    with pytest.raises(VaultError, match="sealed with key"):
        Vault(os.urandom(32)).open(blob, key_id, AAD)
    # Even when the key id is forged to match, authentication fails.
    other = Vault(os.urandom(32))
    with pytest.raises(VaultError, match="failed authentication"):
        other.open(blob, other.key_id or "", AAD)


@pytest.mark.parametrize("position", [0, 5, 20, -1])
def test_tampering_fails_loudly(position: int) -> None:
    vault = Vault(KEY)
    blob, key_id = vault.seal("s3cret", AAD)
    damaged = bytearray(blob)
    damaged[position] ^= 0x01
    with pytest.raises(VaultError):
        vault.open(bytes(damaged), key_id, AAD)


def test_a_ciphertext_moved_to_another_row_fails() -> None:
    vault = Vault(KEY)
    blob, key_id = vault.seal("s3cret", AAD)
    with pytest.raises(VaultError, match="failed authentication"):
        vault.open(blob, key_id, binding("connections", "secret", "cn_2"))
    with pytest.raises(VaultError):
        vault.open(blob, key_id, binding("webhooks", "secret", "cn_1"))


def test_without_a_key_secrets_are_refused_unless_plaintext_is_allowed() -> None:
    vault = Vault(None)
    with pytest.raises(EncryptionRequired):
        vault.seal("s3cret", AAD)
    with pytest.raises(EncryptionRequired):
        vault.fingerprint("s3cret")
    blob, key_id = vault.seal("whsec_x", AAD, allow_plaintext=True)
    assert vault.open(blob, key_id, AAD) == "whsec_x"
    # A later key still reads what was stored before it existed.
    assert Vault(KEY).open(blob, key_id, AAD) == "whsec_x"


def test_encrypted_secret_needs_the_key() -> None:
    blob, key_id = Vault(KEY).seal("s3cret", AAD)
    with pytest.raises(VaultError, match="no encryption key"):
        Vault(None).open(blob, key_id, AAD)


def test_fingerprints_are_keyed_and_stable() -> None:
    a, b = Vault(KEY), Vault(os.urandom(32))
    assert a.fingerprint("tok") == a.fingerprint("tok")
    assert a.fingerprint("tok") != a.fingerprint("tok2")
    # Someone without the key cannot test guesses against a fingerprint.
    assert a.fingerprint("tok") != b.fingerprint("tok")
    assert "tok" not in a.fingerprint("tok")


def test_generated_keys_are_32_bytes() -> None:
    import base64

    assert len(base64.b64decode(generate_key())) == 32
    assert generate_key() != generate_key()
