"""``switchboard outbox``: deliver the outbox (``run``), inspect it (``status``), requeue dead letters (``retry``)."""

from __future__ import annotations

import time

import typer

from router.cli._common import JsonOpt, database, emit, fail, settings

app = typer.Typer(help="Deliver and inspect outbound messages (replies, agent messages, channel actions).",
                  no_args_is_help=True)


def _summary(totals) -> dict[str, int]:
    return {k: int(totals.get(k, 0)) for k in ("delivered", "skipped", "retry", "dead")}


def _check_channels(s, names: list[str], as_json: bool, also: list[str] = ()) -> None:
    """Unknown channel names are a typo, not an empty result: refuse them (exit 2)."""
    if not names:
        return
    from router.channels.registry import ADAPTERS

    known = sorted(set(ADAPTERS) | set(also))
    unknown = [n for n in names if n not in known]
    if unknown:
        fail(f"unknown channel {', '.join(map(repr, unknown))} (known: {', '.join(known)})", as_json, code=2)


@app.command()
def run(
    once: bool = typer.Option(False, "--once", help="Deliver what is due now, then exit (retries scheduled for "
                                                    "later stay queued)."),
    seconds: float = typer.Option(None, "--seconds", min=0.0, help="Stop after this many seconds (default: until Ctrl-C; "
                                                          "with --once: at most 30)."),
    channel: list[str] = typer.Option(None, "--channel", help="Only these channels (repeatable)."),
    as_json: bool = JsonOpt,
) -> None:
    """Run the dispatcher: leader-elected, so any number of these (and the app's own loop) may run; one delivers."""
    import psycopg
    from tqdm import tqdm

    from router.db import open_pool
    from router.outbox import LEADER_LOCK_KEY, DispatcherLoop, build_dispatcher, outbox_status
    from router.outbox.store import due_count

    s = settings()
    _check_channels(s, channel or [], as_json)
    try:
        dsn = database(s)
    except Exception as exc:  # noqa: BLE001
        fail(f"database: {type(exc).__name__}: {exc}", as_json)
    pool = open_pool(dsn, min_size=1, max_size=max(2, s.outbox_concurrency + 1), name="outbox-cli")
    dispatcher = build_dispatcher(s, pool, channels=channel or None)
    t0 = time.monotonic()
    try:
        if once:
            with psycopg.connect(dsn, autocommit=True) as lock_conn:
                if not lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK_KEY,)).fetchone()[0]:
                    fail("another dispatcher holds the leader lock (the app's loop or `outbox run`); "
                         "it is delivering already", as_json, code=2)
                with pool.connection() as conn:
                    due = due_count(conn)
                with tqdm(total=due, desc="delivering", unit="msg", disable=as_json) as bar:
                    totals = dispatcher.drain(max_seconds=seconds if seconds is not None else 30.0, progress=bar)
        else:
            loop = DispatcherLoop(dsn, dispatcher, poll_seconds=s.outbox_poll_seconds)
            if not as_json:
                typer.echo("outbox dispatcher running (Ctrl-C to stop); waits for the leader lock if another runs")
            loop.start()
            try:
                while seconds is None or time.monotonic() - t0 < seconds:
                    time.sleep(0.2)
            except KeyboardInterrupt:
                pass
            finally:
                loop.stop()
            totals = loop.totals
        with pool.connection() as conn:
            status = outbox_status(conn)
    finally:
        dispatcher.close()
        pool.close()
    summary = {**_summary(totals), "seconds": round(time.monotonic() - t0, 2), "outbox": status}
    emit(summary, as_json, (
        f"delivered {summary['delivered']}, skipped {summary['skipped']}, retry later {summary['retry']}, "
        f"dead {summary['dead']} in {summary['seconds']}s; "
        f"queue: {_queue_line(status)}"))


def _queue_line(status) -> str:
    parts = []
    for ch, counts in sorted(status["by_channel"].items()):
        parts.append(f"{ch} " + " ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return "; ".join(parts) or "empty"


@app.command()
def status(as_json: bool = JsonOpt) -> None:
    """Counts by channel and status, the oldest due row's wait, and the latest dead letters with their reasons."""
    import psycopg
    from psycopg.rows import dict_row

    from router.outbox import outbox_status

    s = settings()
    try:
        dsn = database(s)
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            data = outbox_status(conn)
    except Exception as exc:  # noqa: BLE001
        fail(f"{type(exc).__name__}: {exc}", as_json)
    if as_json:
        emit(data, True)
        return
    typer.echo(f"queue: {_queue_line(data)}")
    if data["oldest_due_seconds"] is not None:
        typer.echo(f"oldest due row waits {data['oldest_due_seconds']:.1f}s")
    for d in data["dead_letters"]:
        typer.echo(f"dead #{d['id']} {d['channel']}/{d['kind']} after {d['attempts']} attempts: {d['last_error']}")
    for ch, counts in sorted(data["receipts"].items()):
        typer.echo(f"receipts {ch}: " + " ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    for f in data["failed_receipts"]:
        typer.echo(f"failed on the channel #{f['id']} {f['channel']}: {f['error_code']} {f['error_title']}")


@app.command()
def retry(
    ids: list[int] = typer.Option(None, "--id", help="Dead letters to requeue (repeatable)."),
    channel: str = typer.Option(None, "--channel", help="Only this channel's dead letters."),
    all_dead: bool = typer.Option(False, "--all", help="Every dead letter (of --channel, if given)."),
    as_json: bool = JsonOpt,
) -> None:
    """Give dead letters a fresh set of attempts, after fixing what killed them (a token, a URL)."""
    import psycopg
    from psycopg.rows import dict_row

    from router.outbox import requeue_dead
    from router.outbox.store import stored_channels

    if not ids and not all_dead:
        fail("name the dead letters with --id, or pass --all", as_json, code=2)
    s = settings()
    try:
        dsn = database(s)
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            if channel:   # a typo is refused; a channel whose sender was removed keeps its dead letters retryable
                stored = stored_channels(conn)
                _check_channels(s, [channel], as_json, also=stored)
            n = requeue_dead(conn, ids or None, channel)
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001
        fail(f"{type(exc).__name__}: {exc}", as_json)
    emit({"requeued": n}, as_json, f"requeued {n} dead letter(s)")
