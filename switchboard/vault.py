"""Held secrets: envelope encryption (AES-256-GCM) and keyed fingerprints.

Each secret gets its own random data key; the data key is wrapped under the operator's key
(``SWITCHBOARD_SECRET_ENCRYPTION_KEY``). Both layers bind associated data naming the table, column
and row, so a ciphertext copied onto another row does not decrypt. The key id (a hash of the key,
not the key) is stored beside the ciphertext so a wrong key is reported as such.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_VERSION = b"\x01"
_PLAIN = b"plain:"
PLAINTEXT_KEY_ID = "plaintext"


class VaultError(Exception):
    """A secret could not be sealed or opened. The message never contains the secret."""


class EncryptionRequired(VaultError):
    """No encryption key is configured, and this secret may not be stored in plaintext."""


def generate_key() -> str:
    """A fresh key for SWITCHBOARD_SECRET_ENCRYPTION_KEY (32 random bytes, base64)."""
    return base64.b64encode(os.urandom(32)).decode()


def key_id_of(key: bytes) -> str:
    return "k_" + hashlib.sha256(b"switchboard key id\0" + key).hexdigest()[:16]


def binding(table: str, column: str, row_id: str) -> bytes:
    """The associated data tying a ciphertext to one row and column."""
    return f"switchboard:{table}:{column}:{row_id}".encode()


class Vault:
    def __init__(self, key: bytes | None) -> None:
        if key is not None and len(key) != 32:
            raise VaultError("the encryption key must be 32 bytes")
        self._key = key
        self.key_id = key_id_of(key) if key else None
        # A separate key for fingerprints, so a fingerprint reveals nothing about the encryption key.
        self._fp_key = hmac.new(key, b"switchboard fingerprint", hashlib.sha256).digest() if key else None

    @property
    def has_key(self) -> bool:
        return self._key is not None

    def seal(self, secret: str, aad: bytes, *, allow_plaintext: bool = False) -> tuple[bytes, str]:
        """Encrypt ``secret`` for the row named by ``aad``; returns (ciphertext, key id)."""
        if self._key is None:
            if not allow_plaintext:
                raise EncryptionRequired("no SWITCHBOARD_SECRET_ENCRYPTION_KEY is configured")
            return _PLAIN + secret.encode(), PLAINTEXT_KEY_ID
        data_key = AESGCM.generate_key(bit_length=256)
        wrap_nonce, nonce = os.urandom(12), os.urandom(12)
        wrapped = AESGCM(self._key).encrypt(wrap_nonce, data_key, aad)
        sealed = AESGCM(data_key).encrypt(nonce, secret.encode(), aad)
        header = _VERSION + struct.pack(">H", len(wrapped))
        return header + wrap_nonce + wrapped + nonce + sealed, self.key_id or ""

    def open(self, blob: bytes, key_id: str, aad: bytes) -> str:
        """Decrypt a sealed secret; raise VaultError for a wrong key, tampering or a moved row."""
        if key_id == PLAINTEXT_KEY_ID:
            if not blob.startswith(_PLAIN):
                raise VaultError("stored secret is damaged")
            return blob[len(_PLAIN) :].decode()
        if self._key is None:
            raise VaultError("this secret is encrypted but no encryption key is configured")
        if key_id != self.key_id:
            raise VaultError(
                f"this secret was sealed with key {key_id}, not the configured key {self.key_id}"
            )
        try:
            if blob[:1] != _VERSION:
                raise ValueError
            (wrapped_len,) = struct.unpack(">H", blob[1:3])
            wrap_nonce = blob[3:15]
            wrapped = blob[15 : 15 + wrapped_len]
            nonce = blob[15 + wrapped_len : 27 + wrapped_len]
            sealed = blob[27 + wrapped_len :]
            data_key = AESGCM(self._key).decrypt(wrap_nonce, wrapped, aad)
            return AESGCM(data_key).decrypt(nonce, sealed, aad).decode()
        except (InvalidTag, ValueError, struct.error):
            raise VaultError("stored secret failed authentication (tampered, or not this row's)") from None

    def fingerprint(self, secret: str) -> str:
        """A keyed fingerprint: identifies a secret on screens without letting anyone test guesses."""
        if self._fp_key is None:
            raise EncryptionRequired("no SWITCHBOARD_SECRET_ENCRYPTION_KEY is configured")
        return "fp_" + hmac.new(self._fp_key, secret.encode(), hashlib.sha256).hexdigest()[:20]
