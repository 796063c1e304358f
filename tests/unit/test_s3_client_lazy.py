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
