"""``switchboard serve``: run the gateway until Ctrl-C."""

from __future__ import annotations

import typer


def serve(
    host: str = typer.Option(None, help="Bind address (default from SWITCHBOARD_HOST, 127.0.0.1)."),
    port: int = typer.Option(None, help="Port (default from SWITCHBOARD_PORT, 8000)."),
) -> None:
    """Serve the gateway; on Ctrl-C it drains requests, closes the pool and stops the embedded database it started."""
    import uvicorn

    from router.app import create_app
    from router.cli._common import settings
    from router.observability import configure_logging

    s = settings()
    configure_logging(s.log_level, s.log_json)
    app = create_app(s)
    uvicorn.run(app, host=host or s.host, port=port or s.port, log_config=None, timeout_graceful_shutdown=10)
