"""Run the example shop, or print what it holds.

    python -m examples.shop                         # MCP over stdio (how the tool gateway starts it)
    python -m examples.shop --http --port 8201      # MCP over streamable HTTP at http://127.0.0.1:8201/mcp
    python -m examples.shop dump [--json]           # every order with its status and the writes (personal data masked)
    python -m examples.shop --latency-ms 300        # every tool answers 300 ms late (or SWITCHBOARD_SHOP_LATENCY_MS)
    python -m examples.shop --hang                  # no tool ever answers (or SWITCHBOARD_SHOP_HANG=1)
    python -m examples.shop --calls-log calls.jsonl # one line per call: tool, start, end (or SWITCHBOARD_SHOP_CALLS_LOG)
    python -m examples.shop --hold-while hold.flag  # calls wait while that file exists (or SWITCHBOARD_SHOP_HOLD_WHILE)
    python -m examples.shop --gather 48             # calls wait until 48 are in hand at once (or SWITCHBOARD_SHOP_GATHER)

The database comes from ``--dsn`` or ``SWITCHBOARD_DATABASE_URL``; the data from ``--data`` or
``SWITCHBOARD_SHOP_DATA`` (default: the bundled sample_data.json), loaded on start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _dsn(value: str | None) -> str:
    dsn = value or os.environ.get("SWITCHBOARD_DATABASE_URL")
    if not dsn:
        print("no database: pass --dsn or set SWITCHBOARD_DATABASE_URL", file=sys.stderr)
        raise SystemExit(2)
    return dsn


def serve(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.shop", description="The example shop's MCP server.",
                                epilog="Subcommand: `dump [--json]` prints every order and the writes against it.")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8201, help="HTTP port (default 8201)")
    p.add_argument("--dsn", help="Postgres DSN (default: $SWITCHBOARD_DATABASE_URL)")
    p.add_argument("--data", help="customers and orders JSON (default: $SWITCHBOARD_SHOP_DATA or the bundled sample)")
    p.add_argument("--reload", choices=("always", "changed"), default="always",
                   help="replace the shop's data on start always, or only when the data file changed since it was "
                        "loaded (keeps the recorded writes across restarts)")
    p.add_argument("--latency-ms", type=float, default=float(os.environ.get("SWITCHBOARD_SHOP_LATENCY_MS") or 0),
                   help="delay every tool's answer by this many ms (default $SWITCHBOARD_SHOP_LATENCY_MS or 0): a "
                        "slow shop for benchmarks and tests")
    p.add_argument("--hang", action="store_true",
                   default=os.environ.get("SWITCHBOARD_SHOP_HANG", "").lower() in ("1", "true", "yes"),
                   help="never answer a tool call (default $SWITCHBOARD_SHOP_HANG): a shop that hangs")
    p.add_argument("--calls-log", default=os.environ.get("SWITCHBOARD_SHOP_CALLS_LOG") or None,
                   help="append one JSON line per tool call (tool, start, end) to this file (default "
                        "$SWITCHBOARD_SHOP_CALLS_LOG): which calls the shop had in hand at once")
    p.add_argument("--hold-while", default=os.environ.get("SWITCHBOARD_SHOP_HOLD_WHILE") or None,
                   help="a call waits while this file exists and is empty or names its tool (default "
                        "$SWITCHBOARD_SHOP_HOLD_WHILE): a call a test releases by deleting the file, instead of "
                        "a latency it must race")
    p.add_argument("--gather", type=int, default=int(os.environ.get("SWITCHBOARD_SHOP_GATHER") or 0),
                   help="calls wait until this many are in hand together, then all answer (default "
                        "$SWITCHBOARD_SHOP_GATHER or 0: off); after --gather-patience seconds a round answers "
                        "anyway and the calls log marks its calls gathered: false")
    p.add_argument("--gather-patience", type=float,
                   default=float(os.environ.get("SWITCHBOARD_SHOP_GATHER_PATIENCE") or 20.0),
                   help="seconds a gathering round waits for its calls (default $SWITCHBOARD_SHOP_GATHER_PATIENCE "
                        "or 20)")
    args = p.parse_args(argv)
    if args.latency_ms < 0:
        p.error("--latency-ms must be >= 0")
    if args.gather < 0 or args.gather_patience <= 0:
        p.error("--gather must be >= 0 and --gather-patience > 0")

    from examples.shop.server import build_server
    from examples.shop.store import Shop

    shop = Shop(_dsn(args.dsn))
    try:
        shop.load(args.data or os.environ.get("SWITCHBOARD_SHOP_DATA") or None, reload=args.reload)
        app = build_server(shop, latency_ms=args.latency_ms, hang=args.hang, calls_log=args.calls_log,
                           hold_while=args.hold_while, gather=args.gather, gather_patience=args.gather_patience)
        if args.http:
            app.run("streamable-http", host=args.host, port=args.port)
        else:
            app.run()
    finally:
        shop.close()
    return 0


def dump(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.shop dump",
                                description="Every order with its current status and the writes recorded against it.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--show-personal-data", action="store_true",
                   help="show customers' names, phone numbers and addresses as stored (masked by default)")
    p.add_argument("--dsn", help="Postgres DSN (default: $SWITCHBOARD_DATABASE_URL)")
    args = p.parse_args(argv)

    from examples.shop.store import Shop, ShopError

    shop = Shop(_dsn(args.dsn), max_size=1)
    try:
        data = shop.dump()
    except ShopError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        shop.close()
    from examples.shop.report import masked, table

    if not args.show_personal_data:
        data = masked(data)
    if args.json:
        print(json.dumps(data, ensure_ascii=False, indent=2, default=str))
        return 0
    print(table(data))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "dump":
        return dump(argv[1:])
    return serve(argv)


if __name__ == "__main__":
    raise SystemExit(main())
