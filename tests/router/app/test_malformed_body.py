"""A body that is not valid UTF-8 JSON is malformed input: 422 problem+json, as the README says."""

from __future__ import annotations


def test_invalid_utf8_is_422(client):
    r = client.post("/v1/messages", content=b'{"channel":"web","text":"\xff\xfe"}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["detail"] == "The request body is not valid UTF-8 JSON."


def test_broken_json_is_422_too(client):
    r = client.post("/v1/messages", content=b'{"channel": "web", ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
