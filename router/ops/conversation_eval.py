"""Conversation scripts for deployers: multi-turn cases with expectations, run against a gateway.

One JSON object a line (see the README, "Conversation eval")::

    {"id": "greeting-then-order", "channel": "web",
     "turns": [{"text": "hello", "expect": {"tier": "L1", "ticket": false, "lang": "en", "intent": "greeting"}},
               {"text": "where is my order?", "expect": {"ticket": false, "reply_contains": "order number"}}]}

Expectations of a turn (each optional): ``tier`` (L1 | L2 | L3 | null), ``ticket`` (a ticket holds the
conversation after the turn), ``lang`` (the reply's language), ``citations`` (true / false: the reply
cites the knowledge base; or a list of doc ids that must all be cited), ``intent``, ``state``,
``outcome`` (resolved | clarified | ticketed | held | none), ``reply`` (a reply was sent),
``reply_contains`` and ``escalation`` (the rule). Workflows, from the system of record after the turn
(the conversation's flows: in process from Postgres, against ``--url`` from the trace endpoint):

- ``flow``: a subset of the latest flow (of ``flow.workflow`` when given): ``workflow``, ``status``
  (waiting | running | waiting_approval | completed | cancelled | escalated), ``outcome``, ``step``,
  ``awaiting``, ``version``; ``null`` means no flow answered the turn;
- ``slots``: a subset of that flow's slots (numbers compare as numbers: 30 == 30.0);
- ``tools``: a list of calls the conversation's flows made, each ``{"tool", "status", "output": {subset},
  "times": N}`` (``times``: exactly N such calls, default at least one; ``times: 0``: none).

They are reported as not evaluated when the gateway has no workflows or the flows cannot be read.

The run reports the pass rate per expectation, cases passed, and deflection: per turn (the
gateway's outcome) and per case (resolved by the bot, clarified only, or ticketed).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHECKS = ("tier", "ticket", "lang", "citations", "intent", "state", "outcome", "reply", "reply_contains",
          "escalation")
HOOKS = ("flow", "slots", "tools")


class CaseError(ValueError):
    """A script line that is not a valid case (names the line)."""


def load_cases(path: str | Path) -> list[dict[str, Any]]:
    cases = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            case = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CaseError(f"{path}:{n}: not JSON: {exc}") from None
        turns = case.get("turns") if isinstance(case, dict) else None
        if not isinstance(turns, list) or not turns or not all(
                isinstance(t, dict) and isinstance(t.get("text"), str) and t["text"].strip() for t in turns):
            raise CaseError(f"{path}:{n}: a case needs `turns`, a non-empty list of {{text, expect}}")
        for t in turns:
            unknown = set(t.get("expect") or {}) - set(CHECKS) - set(HOOKS)
            if unknown:
                raise CaseError(f"{path}:{n}: unknown expectations {sorted(unknown)} "
                                f"(known: {', '.join(CHECKS + HOOKS)})")
        case.setdefault("id", f"line-{n}")
        cases.append(case)
    if not cases:
        raise CaseError(f"{path}: no cases")
    return cases


@contextmanager
def sandbox(settings, dsn: str, *, tools_file: str | Path | None = None) -> Iterator[Any]:
    """Settings for a gateway that cannot touch the real one's data: a throwaway database created on the
    server of ``dsn`` (migrated by the gateway; the example shop loads its sample data into it), a
    temporary home whose index is its own (models and caches are the real ones, read-only in use), no
    Elasticsearch, no outbox dispatcher, and the example shop started over stdio on that database
    (``SWITCHBOARD_SHOP_URL`` is ignored) unless ``tools_file`` names other tools. Dropped on exit."""
    import psycopg
    from pydantic import SecretStr

    name = f"switchboard_eval_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        raise ValueError(f"cannot create the sandbox database {name} ({exc}): the eval needs CREATEDB on the "
                           "configured server, or run it against a staging gateway with --url") from None
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = name
    home = Path(tempfile.mkdtemp(prefix="switchboard-eval-"))
    for shared in ("models", "cache"):
        real = Path(settings.home) / shared
        real.mkdir(parents=True, exist_ok=True)
        (home / shared).symlink_to(real.resolve(), target_is_directory=True)
    shop_url = os.environ.pop("SWITCHBOARD_SHOP_URL", None)
    try:
        yield settings.model_copy(update={
            "home": home, "database_url": SecretStr(psycopg.conninfo.make_conninfo(**params)),
            "elasticsearch_url": None, "dispatcher_enabled": False, "tools_enabled": True,
            "tools_file": Path(tools_file) if tools_file else None})
    finally:
        if shop_url is not None:
            os.environ["SWITCHBOARD_SHOP_URL"] = shop_url
        shutil.rmtree(home, ignore_errors=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _observed(response: dict[str, Any]) -> dict[str, Any]:
    reply = response.get("reply") or None
    decision = response.get("decision") or {}
    return {
        "tier": decision.get("tier"), "ticket": bool(response.get("ticket_id")),
        "lang": (reply or {}).get("lang") or response.get("lang"),
        "citations": [c.get("doc_id") for c in (reply or {}).get("citations") or []],
        "intent": decision.get("intent"), "state": response.get("state"), "outcome": response.get("outcome"),
        "reply": reply is not None, "text": (reply or {}).get("text") or "",
        "escalation": (decision.get("escalation") or {}).get("rule"),
    }


def _matches(want: Any, got: Any) -> bool:
    """``want`` is contained in ``got``: dicts by key (recursively), lists item by item, numbers by value."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and _matches(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(_matches(w, g) for w, g in zip(want, got))
    if isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(got, (int, float, str)) \
            and not isinstance(got, bool):
        try:
            return abs(float(got) - float(want)) < 1e-9
        except ValueError:
            return False
    return want == got


def _latest_flow(expect: dict[str, Any], response: dict[str, Any], flows: list[dict] | None) -> dict | None:
    want = expect.get("flow") if isinstance(expect.get("flow"), dict) else {}
    name = want.get("workflow")
    recorded = [f for f in flows or [] if name is None or f.get("workflow") == name]
    latest = dict(recorded[-1]) if recorded else None
    answered = response.get("flow")
    if answered and (name is None or answered.get("workflow") == name):
        if latest is None or latest.get("instance_id") == answered.get("instance_id"):
            latest = {**(latest or {}), **{k: v for k, v in answered.items() if v is not None}}
    return latest


def _check_hook(key: str, want: Any, expect: dict[str, Any], response: dict[str, Any],
                flows: list[dict] | None) -> bool | None:
    if key == "flow" and want is None:
        return response.get("flow") is None
    if flows is None and key != "flow":
        return None
    latest = _latest_flow(expect, response, flows)
    if key == "flow":
        if latest is None:
            return None if flows is None and not response.get("flow") else False
        return _matches(want, latest)
    if key == "slots":
        return _matches(want, (latest or {}).get("slots") or {}) if latest is not None else False
    calls = [c for f in flows for c in f.get("calls") or []]
    for item in want if isinstance(want, list) else [want]:
        item = dict(item)
        times = item.pop("times", None)
        n = sum(1 for c in calls if _matches(item, c))
        if (times is None and n == 0) or (times is not None and n != times):
            return False
    return True


def check(expect: dict[str, Any], response: dict[str, Any], flows: list[dict] | None = None) -> dict[str, bool | None]:
    """Each expectation -> passed (True/False) or None when it cannot be evaluated here.

    ``flows``: the conversation's flows after the turn (``automation.workflows.store.conversation_flows``
    or the trace's ``flows``); None when they cannot be read (``flow`` then uses the response alone)."""
    seen = _observed(response)
    out: dict[str, bool | None] = {}
    for key, want in expect.items():
        if key in HOOKS:
            out[key] = _check_hook(key, want, expect, response, flows)
        elif key == "citations":
            out[key] = (bool(seen["citations"]) == want) if isinstance(want, bool) else \
                set(want) <= set(seen["citations"])
        elif key == "reply_contains":
            out[key] = str(want).lower() in seen["text"].lower()
        else:
            out[key] = seen[key] == want
    return out


def case_outcome(outcomes: list[str]) -> str:
    """A conversation's deflection: ticketed if any turn opened or joined a ticket, else resolved if the
    bot answered something, else clarified (only clarifying replies), else none."""
    if any(o in ("ticketed", "held") for o in outcomes):
        return "ticketed"
    if "resolved" in outcomes:
        return "resolved"
    if "clarified" in outcomes:
        return "clarified"
    return "none"


def run_cases(cases: Iterable[dict[str, Any]], send: Callable[[dict[str, Any]], dict[str, Any]], *,
              run_id: str | None = None, on_case: Callable[[int], None] | None = None,
              inspect: Callable[[dict[str, Any]], list[dict] | None] | None = None) -> dict[str, Any]:
    """Run every case as a fresh conversation through ``send`` (one message dict -> the turn's JSON).

    ``inspect(response)``: the conversation's flows after the turn, for the ``flow``/``slots``/``tools``
    expectations (asked only for turns that expect one of them)."""
    run_id = run_id or uuid.uuid4().hex[:8]
    per_key: dict[str, dict[str, int]] = {}
    turn_outcomes: dict[str, int] = {}
    conv_outcomes: dict[str, int] = {}
    results = []
    for i, case in enumerate(cases):
        conv = f"eval-{run_id}-{i}"
        channel = case.get("channel", "web")
        outcomes, failures = [], []
        for j, turn in enumerate(case["turns"]):
            response = send({"channel": channel, "conversation_id": conv, "customer_id": case.get("customer_id", conv),
                             "message_id": f"{conv}-{j}", "text": turn["text"]})
            outcome = response.get("outcome") or "none"
            outcomes.append(outcome)
            turn_outcomes[outcome] = turn_outcomes.get(outcome, 0) + 1
            expect = turn.get("expect") or {}
            flows = None
            if inspect is not None and set(expect) & set(HOOKS) and response.get("conversation_id"):
                flows = inspect(response)
            for key, ok in check(expect, response, flows).items():
                bucket = per_key.setdefault(key, {"passed": 0, "failed": 0, "not_evaluated": 0})
                bucket["passed" if ok else "not_evaluated" if ok is None else "failed"] += 1
                if ok is False:
                    got = _observed(response).get(key)
                    if key in HOOKS:
                        latest = _latest_flow(expect, response, flows)
                        got = (latest or {}).get("slots") if key == "slots" else latest if key == "flow" else \
                            [{k: c.get(k) for k in ("tool", "status", "output")}
                             for f in flows or [] for c in f.get("calls") or []]
                    failures.append({"turn": j, "text": turn["text"], "expect": key, "want": expect[key], "got": got})
        conv_outcome = case_outcome(outcomes)
        conv_outcomes[conv_outcome] = conv_outcomes.get(conv_outcome, 0) + 1
        results.append({"id": case["id"], "passed": not failures, "outcome": conv_outcome, "failures": failures})
        if on_case:
            on_case(i + 1)
    n_turns = sum(turn_outcomes.values())
    n_cases = len(results)
    return {
        "cases": n_cases, "cases_passed": sum(r["passed"] for r in results),
        "case_pass_rate": round(sum(r["passed"] for r in results) / n_cases, 4) if n_cases else None,
        "expectations": {k: {**v, "pass_rate": round(v["passed"] / (v["passed"] + v["failed"]), 4)
                             if v["passed"] + v["failed"] else None} for k, v in sorted(per_key.items())},
        "deflection": {
            "turns": n_turns, "turn_outcomes": turn_outcomes,
            "conversations": conv_outcomes,
            "resolved_rate": round(conv_outcomes.get("resolved", 0) / n_cases, 4) if n_cases else None,
            "clarified_rate": round(conv_outcomes.get("clarified", 0) / n_cases, 4) if n_cases else None,
            "ticketed_rate": round(conv_outcomes.get("ticketed", 0) / n_cases, 4) if n_cases else None,
        },
        "results": results,
    }
