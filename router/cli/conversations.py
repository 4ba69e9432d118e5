"""``switchboard eval conversations``: run multi-turn conversation scripts against a gateway."""

from __future__ import annotations

from pathlib import Path

import typer

from router.cli._common import JsonOpt, emit, fail, settings

app = typer.Typer(help="Evaluate the gateway on conversation scripts.", no_args_is_help=True)


@app.command("conversations")
def conversations_cmd(
    file: Path = typer.Argument(..., help="JSONL: one case a line, {id, channel, turns: [{text, expect}]} "
                                "(format in the README, 'Conversation eval')."),
    url: str = typer.Option(None, "--url", help="A running gateway (POST {url}/v1/messages); default: an "
                            "in-process gateway on the configured database and models."),
    header: list[str] = typer.Option(None, "--header", help="Extra HTTP header for --url, 'Name: value' "
                                     "(repeatable)."),
    tools: Path = typer.Option(None, "--tools", help="In process: the tools file of the sandbox (default: the "
                               "bundled example shop, started on the sandbox database). Its calls are real."),
    failures: bool = typer.Option(False, "--failures", help="List every failed expectation in the text output."),
    as_json: bool = JsonOpt,
) -> None:
    """Each case is a fresh conversation; reports the pass rate per expectation and deflection
    (conversations resolved by the bot, clarified, ticketed).

    In process it runs in a sandbox: a throwaway database on the configured server (conversations,
    tickets and the example shop's orders and refunds all in it, dropped at the end) and its own index
    directory, so a run never writes to the real shop or queue. With --url the cases go to that gateway,
    through its own tools, so it runs only when the gateway declares them a sandbox (SWITCHBOARD_TOOLS_SANDBOX,
    shown by /readyz) or has none. A refused key (401/403) stops the run."""
    from router.ops.conversation_eval import CaseError, load_cases

    try:
        cases = load_cases(file)
    except (CaseError, OSError) as exc:
        fail(str(exc), as_json, code=2)
    progress = None
    if not as_json:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(cases), desc="cases", unit="case", leave=False)
        progress = lambda n: bar.update(1)   # noqa: E731
    if url:
        report = _run_live(url, header or [], cases, progress, as_json)
    else:
        report = _run_in_process(cases, progress, tools)
    report["gateway"] = url or "in-process"
    lines = [f"{report['cases_passed']}/{report['cases']} cases passed ({report['gateway']})", "",
             "| expectation | passed | failed | not evaluated | pass rate |", "|---|---|---|---|---|"]
    for key, v in report["expectations"].items():
        lines.append(f"| {key} | {v['passed']} | {v['failed']} | {v['not_evaluated']} | {v['pass_rate']} |")
    d = report["deflection"]
    lines += ["", f"deflection: resolved {d['resolved_rate']}, clarified {d['clarified_rate']}, ticketed "
                  f"{d['ticketed_rate']} of {report['cases']} conversations; turns {d['turn_outcomes']}"]
    if failures:
        for r in report["results"]:
            for f in r["failures"]:
                lines.append(f"  {r['id']} turn {f['turn']} {f['text']!r}: {f['expect']} want {f['want']!r} "
                             f"got {f['got']!r}")
    emit(report, as_json, "\n".join(lines))


def _run_live(url: str, headers: list[str], cases, progress, as_json: bool):
    import httpx

    from router.ops.conversation_eval import run_cases

    hdrs = {}
    for h in headers:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            fail(f"--header takes 'Name: value', not {h!r}", as_json, code=2)
        hdrs[name.strip()] = value.strip()
    with httpx.Client(base_url=url.rstrip("/"), headers=hdrs, timeout=60) as client:
        _refuse_a_live_shop(client, url, as_json)

        def send(message):
            try:
                r = client.post("/v1/messages", json=message)
            except httpx.HTTPError as exc:
                fail(f"{url}: {type(exc).__name__}: {exc}", as_json)
            if r.status_code in (401, 403):   # every case would "fail": that is no result, it is a wrong key
                fail(f"{url} refused the request ({r.status_code} {_problem_title(r)}): pass an integration key "
                     f"for channel {message['channel']!r} with --header 'Authorization: Bearer <key>'", as_json)
            if r.status_code >= 400:
                return {"error": r.status_code, "outcome": "none"}
            return r.json()

        def inspect(response):
            """The conversation's flows from its trace (needs a key that may read traces, via --header)."""
            r = client.get(f"/v1/conversations/{response['conversation_id']}/trace")
            return r.json().get("flows") if r.status_code == 200 else None
        return run_cases(cases, send, on_case=progress, inspect=inspect)


def _refuse_a_live_shop(client, url: str, as_json: bool) -> None:
    """An evaluation never writes to a real shop: the gateway must say (GET /readyz) that its tools reach a
    sandbox (SWITCHBOARD_TOOLS_SANDBOX=true) or that it has none."""
    import httpx

    try:
        r = client.get("/readyz")
        tools = r.json().get("tools")
    except (httpx.HTTPError, ValueError) as exc:
        fail(f"{url}: cannot read /readyz ({type(exc).__name__}): the gateway's tools are unknown", as_json)
    if tools not in ("sandbox", "off"):
        what = "call a live shop" if tools == "live" else "are not declared (an older gateway?)"
        fail(f"{url}: the gateway's tools {what}; an evaluation would write to it. Point --url at a staging "
             "gateway started with SWITCHBOARD_TOOLS_SANDBOX=true (its tools file on a sandbox shop), or run "
             "in process (a throwaway sandbox with the example shop is made for you).", as_json, code=2)


def _problem_title(r) -> str:
    try:
        return str(r.json().get("title") or r.reason_phrase)
    except ValueError:
        return r.reason_phrase


def _run_in_process(cases, progress, tools: Path | None):
    from router.cli._common import database
    from router.ops.conversation_eval import run_cases, sandbox
    from router.app.api.messages import MessageIn
    from router.schemas import InboundMessage
    from router.app.composition import build_services

    s = settings()
    with sandbox(s, database(s, migrate_first=False), tools_file=tools) as sandboxed:
        services = build_services(sandboxed, load_models=True)
        try:
            def send(message):
                return services.pipeline.handle(InboundMessage.from_api(MessageIn(**message)))[0]
            return run_cases(cases, send, on_case=progress, inspect=lambda response: flows_of(services, response))
        finally:
            services.close()


def flows_of(services, response) -> list[dict] | None:
    """The conversation's flows after a turn, from Postgres (None when no workflows are wired)."""
    from automation.workflows.store import conversation_flows

    if services.flows is None:
        return None
    with services.pool.connection() as conn:
        return conversation_flows(conn, response["conversation_id"])
