"""What answers without authentication: API docs and metrics behind a key or token by default (public or off by
setting, Swagger UI's assets served locally), health probes open, and the gateway refusing a non-loopback
address while something unauthenticated is on unless told explicitly. Real app, real Postgres, real keys."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from keys_testkit import issue_integration_key
from router.app.factory import create_app

PROBLEM = "application/problem+json"
GUARDED = ("/openapi.json", "/docs", "/metrics")


def _agent_token(pool) -> str:
    from handoff import agents

    with pool.connection() as conn:
        agents.add_agent(conn, "reader", role="agent", teams=("general",), actor="test")
        return agents.issue_token(conn, "reader", label="test", actor="test")[0]


def _app(services, **settings):
    services.settings = services.settings.model_copy(update=settings)
    return TestClient(create_app(services=services))


def test_docs_and_metrics_need_a_key_or_an_agent_token_by_default(services):
    with _app(services) as client:
        key = issue_integration_key(services.pool, ["web"])
        token = _agent_token(services.pool)
        for path in GUARDED:
            for headers in ({}, {"Authorization": "Bearer sbk_" + "x" * 43}, {"Authorization": "Basic YTpi"}):
                r = client.get(path, headers=headers)
                assert r.status_code == 401, (path, headers, r.text)
                assert r.headers["content-type"].startswith(PROBLEM) and r.headers["www-authenticate"]
            for credential in (key, token):
                assert client.get(path, headers={"Authorization": f"Bearer {credential}"}).status_code == 200, path
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code in (200, 503)      # open either way, never 401
        assert client.get("/redoc").status_code == 404              # ReDoc needs a CDN script: not served
        page = client.get("/docs", headers={"Authorization": f"Bearer {key}"}).text
        spec = client.get("/openapi.json", headers={"Authorization": f"Bearer {key}"}).json()
    # Swagger UI from this server, never a CDN
    assert "/docs/assets/swagger-ui-bundle.js" in page and "/docs/assets/swagger-ui.css" in page
    assert "cdn" not in page.lower() and "http://" not in page and "https://" not in page
    assert "/v1/messages" in spec["paths"]


def test_swagger_assets_are_served_locally(services):
    with _app(services) as client:
        js = client.get("/docs/assets/swagger-ui-bundle.js")
        css = client.get("/docs/assets/swagger-ui.css")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"] and len(js.content) > 100_000
    assert css.status_code == 200 and "css" in css.headers["content-type"]


def test_public_and_off(services):
    with _app(services, api_docs="public", metrics_access="public") as client:
        assert all(client.get(p).status_code == 200 for p in GUARDED)
    with _app(services, api_docs="off", metrics_access="off") as client:
        key = issue_integration_key(services.pool, ["web"])
        for path in GUARDED:
            r = client.get(path, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 404, path
        assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("open_setting", [{"dev_key": True}, {"web_unsigned": True}])
def test_an_unauthenticated_surface_beyond_loopback_is_refused_unless_allowed(services, tmp_path, caplog,
                                                                             open_setting):
    with pytest.raises(RuntimeError, match="allow-unauthenticated"):
        with _app(services, host="0.0.0.0", home=tmp_path, **open_setting):
            pass
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="router.app.exposure"):
        with _app(services, host="0.0.0.0", home=tmp_path, allow_unauthenticated=True, **open_setting) as client:
            assert client.get("/healthz").status_code == 200
    assert any("unauthenticated" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="router.app.exposure"):   # loopback: served, with a warning
        with _app(services, host="127.0.0.1", home=tmp_path, allow_unauthenticated=False, **open_setting):
            pass
    assert any("unauthenticated" in r.getMessage() for r in caplog.records)


def test_nothing_open_means_any_address_is_fine(services):
    with _app(services, host="0.0.0.0") as client:         # every channel signed or off, keys and tokens only
        assert client.get("/healthz").status_code == 200


def test_serve_refuses_a_dev_key_on_a_public_address_before_starting(monkeypatch, tmp_path, dsn):
    from typer.testing import CliRunner

    from router.cli import app as cli_app

    for name in ("SWITCHBOARD_DEV_KEY", "SWITCHBOARD_ALLOW_UNAUTHENTICATED", "SWITCHBOARD_HOST"):
        monkeypatch.setenv(name, "")
    monkeypatch.delenv("SWITCHBOARD_DEV_KEY")
    monkeypatch.delenv("SWITCHBOARD_ALLOW_UNAUTHENTICATED")
    monkeypatch.delenv("SWITCHBOARD_HOST")
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path))
    result = CliRunner().invoke(cli_app, ["serve", "--host", "0.0.0.0", "--dev-key"])
    assert result.exit_code == 2
    assert "--allow-unauthenticated" in result.output and "0.0.0.0" in result.output
