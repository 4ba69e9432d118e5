"""``switchboard serve``: run the gateway until Ctrl-C."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import typer


def serve(
    host: str = typer.Option(None, help="Bind address (default from SWITCHBOARD_HOST, 127.0.0.1)."),
    port: int = typer.Option(None, min=1, max=65535, help="Port (default from SWITCHBOARD_PORT, 8000)."),
    workers: int = typer.Option(None, min=1, help="Worker processes (default from SWITCHBOARD_WORKERS, 1)."),
    dev_key: bool = typer.Option(False, "--dev-key", help="Development: create and print a local integration key "
                                 "(web, app) once, kept in $SWITCHBOARD_HOME/dev-integration-key; loopback only "
                                 "unless --allow-unauthenticated."),
    allow_unauthenticated: bool = typer.Option(
        False, "--allow-unauthenticated", help="Serve on a non-loopback address although something answers without "
        "authentication (the dev key, SWITCHBOARD_WEB_UNSIGNED); default from SWITCHBOARD_ALLOW_UNAUTHENTICATED."),
) -> None:
    """Serve the gateway; on Ctrl-C it drains requests, closes the pool and stops the embedded database it started.

    With more than one worker the database is resolved (and the embedded server started, migrations applied)
    once here, before the workers start, and /metrics aggregates every worker (Prometheus multiprocess mode).
    """
    import uvicorn

    from router.app.factory import create_app
    from router.cli._common import settings
    from router.app.exposure import refusal
    from router.telemetry.logs import configure_logging

    from router.app.composition import install_sighup

    install_sighup()   # first: a SIGHUP while the files load and the app is wired is a reload, never the end
    if dev_key:
        os.environ["SWITCHBOARD_DEV_KEY"] = "1"     # the workers read it too
    if allow_unauthenticated:
        os.environ["SWITCHBOARD_ALLOW_UNAUTHENTICATED"] = "1"
    s = settings()
    given = {k: v for k, v in (("host", host), ("port", port)) if v}
    if given:   # the app's "ready" log line then names the address really bound
        s = s.model_copy(update=given)
    configure_logging(s.log_level, s.log_json)
    if host:
        os.environ["SWITCHBOARD_HOST"] = host
    why = refusal(s)
    if why is not None:
        typer.secho(f"error: {why}", fg="red", err=True)
        raise typer.Exit(2)
    _check_files(s)
    # the request head's deadline (router/app/http_protocol.py), read by every worker
    os.environ["SWITCHBOARD_READ_TIMEOUT_SECONDS"] = str(s.read_timeout_seconds)
    n = workers or s.workers
    if n == 1:
        install_sighup()   # in the main thread (done above): the app is wired in a worker thread, where none can be
        app = create_app(s)
        uvicorn.run(app, host=s.host, port=s.port, log_config=None, timeout_graceful_shutdown=10, **http_options())
        return
    _serve_workers(s, s.host, s.port, n)


def http_options() -> dict:
    """uvicorn's h11 with a deadline for the request head; idle kept-alive connections closed after 5 s."""
    from router.app.http_protocol import DeadlineH11Protocol

    return {"http": DeadlineH11Protocol, "timeout_keep_alive": 5}


def _check_files(s) -> None:
    """Load the policy, intents, tools and workflows files before serving: a broken file is its
    file:line error and exit 2, not a traceback from the app's startup nor a gateway serving without it."""
    from router.turn.escalation import load_policy
    from router.classify.intents import load_intents

    load_policy(s.policy_file)
    if s.intents_file is not None:
        load_intents(s.intents_file)
    check_flow_files(s)


class _Specs:
    """The tools a file declares, as the workflows' load-time check asks for them (names, specs)."""

    def __init__(self, specs):
        self._specs = {spec.name: spec for spec in specs}

    def names(self) -> list[str]:
        return sorted(self._specs)

    def spec(self, name: str):
        return self._specs[name]


def check_flow_files(s) -> None:
    """The tools and workflows files, parsed and checked together without starting a tool server: a broken
    one raises (file:line: field: message) and the gateway does not start."""
    from automation.tools.config import load_tools_file, to_specs
    from automation.workflows.spec import load_workflows
    from router.app.composition import tools_configured

    if not tools_configured(s):
        return
    # the database URL is known only once the server is resolved: any value parses the same
    config = load_tools_file(s.tools_file, variables={"SWITCHBOARD_DATABASE_URL": "postgresql://", **os.environ})
    load_workflows(s.workflows_file, tools=_Specs(to_specs(config)))


def worker_environment(settings_, dsn: str, workers: int, metrics_dir: str) -> dict[str, str]:
    """What each worker process inherits: one database for all, the encoder threads split between them
    (unless SWITCHBOARD_TORCH_THREADS, in the environment or .env, says otherwise), and a shared
    directory for the metrics."""
    env = {"SWITCHBOARD_DATABASE_URL": dsn, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
    if "torch_threads" not in settings_.model_fields_set:
        env["SWITCHBOARD_TORCH_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    return env


def _serve_workers(s, host: str, port: int, workers: int) -> None:
    import uvicorn

    from router.db import migrate
    from router.app.services import resolve_dsn

    dsn, embedded, started = resolve_dsn(s)
    migrate(dsn)  # once, before the workers race to it
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")   # e.g. an emptyDir volume
    metrics_dir = given or tempfile.mkdtemp(prefix="switchboard-metrics-")
    for stale in Path(metrics_dir).glob("*.db"):   # a previous run's counters would be added to this one's
        stale.unlink()
    os.environ.update(worker_environment(s, dsn, workers, metrics_dir))
    os.environ.update({"SWITCHBOARD_HOST": host, "SWITCHBOARD_PORT": str(port)})   # each worker's settings
    try:
        uvicorn.run("router.app.factory:main_app", factory=True, host=host, port=port, workers=workers, log_config=None,
                    timeout_graceful_shutdown=10, **http_options())
    finally:
        if not given:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        if started and embedded is not None:
            embedded.stop()
