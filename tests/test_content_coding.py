"""``content_coding`` on its own: what a ``Content-Encoding`` header names, and bodies that are
decoded whole or refused (the HTTP surfaces' answers are in tests/test_app.py)."""

from __future__ import annotations

import gzip

import pytest

from switchboard.content_coding import Undecodable, codings, decoded


def test_the_codings_a_header_names_in_the_order_they_were_applied() -> None:
    assert codings(None) == [] and codings("") == [] and codings("identity") == []
    assert codings(" GZIP , identity,deflate ") == ["gzip", "deflate"]


def test_an_empty_body_labelled_gzip_is_empty() -> None:
    assert decoded(b"", "gzip", 10, "10 bytes") == b""


@pytest.mark.parametrize("header", ["br", "zstd", "compress", "gzip, br", "x-\udcff"])
def test_a_coding_not_decoded_here_is_415_whatever_its_bytes(header: str) -> None:
    with pytest.raises(Undecodable) as refused:
        decoded(b"data", header, 10, "10 bytes")
    assert (refused.value.status, refused.value.code) == (415, "unsupported_encoding")
    # A header aiohttp decoded with surrogate escapes is shown, not raised on.
    refused.value.message.encode("utf-8")


def test_the_cap_counts_decoded_bytes_and_the_last_byte_allowed_is_allowed() -> None:
    assert decoded(gzip.compress(b"x" * 10), "gzip", 10, "10 bytes") == b"x" * 10
    with pytest.raises(Undecodable) as refused:
        decoded(gzip.compress(b"x" * 11), "gzip", 10, "10 bytes")
    assert refused.value.status == 413 and "10 bytes" in refused.value.message
