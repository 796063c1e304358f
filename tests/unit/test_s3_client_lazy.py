"""AudioStore's boto3 client: made on first use, or on a thread by ``warm()``; one client either way."""

from __future__ import annotations

import pytest

from storage.s3 import AudioStore


def _store() -> AudioStore:
    # nothing listens here: making a client connects to nothing
    return AudioStore("http://127.0.0.1:9", "bucket", "key", "secret")


def test_client_is_made_on_first_use_once() -> None:
    store = _store()
    assert store._client_made is None
    first = store._client
    assert store._client is first
    store.close()


def test_warm_makes_it_on_a_thread_and_first_use_gets_that_one() -> None:
    store = _store().warm()
    made = store._client_made
    assert made is not None
    client = made.result(timeout=30)
    assert store.warm()._client is client  # a second warm() starts nothing new
    assert client.meta.endpoint_url == "http://127.0.0.1:9"
    store.close()


def test_a_client_that_cannot_be_made_fails_where_it_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import storage.s3 as s3

    def refuse(*_a: object, **_k: object) -> None:
        raise ValueError("no such endpoint")

    monkeypatch.setattr(s3, "s3_client", refuse)
    store = _store().warm()
    with pytest.raises(ValueError, match="no such endpoint"):
        _ = store._client
    store.close()  # nothing to close, nothing raised


def test_close_without_use_makes_no_client() -> None:
    store = _store()
    store.close()
    assert store._client_made is None


def test_the_signed_puts_key_is_derived_once_a_day_and_is_sigv4s() -> None:
    import hashlib
    import hmac

    def derived(day: str) -> bytes:  # AWS's published derivation, spelled out
        k = b"AWS4secret"
        for part in (day, "us-east-1", "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        return k

    store = _store()
    put = store._put
    assert put._signing_key("20261206") == derived("20261206")
    assert put._day_key[0] == "20261206"
    assert put._signing_key("20261207") == derived("20261207") != derived("20261206")  # a new day, a new key
    store.close()
