"""A message built to make the personal-data detector slow (issue 34, item 1) must not hold the gateway:
ten of them at once, over real HTTP into the real router, and another customer's greeting is still answered
while they run, at a CPU cost near that of as long a message without digits. Before the detector was linear each
took ~50 s and held a pooled connection. Wall time is a benchmark's figure (benchmarks/adversarial.py --turns:
a worst-case turn's wall and CPU), not a timed assert: on a shared machine it measures the machine."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from keys_testkit import issue_integration_key
from ops_testkit import wire_gateway
from serving_testkit import served

from router.app.factory import create_app

WORST = "I want to talk to a human " + "1 " * 800


@pytest.fixture
def live(services, tmp_path):
    """The gateway with the real router, served by uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    wire_gateway(services, tmp_path)
    # the pool as the gateway keeps it (settings.db_pool_min: full); the services fixture opens one connection
    services.pool.resize(services.settings.db_pool_min, services.settings.db_pool_max)
    services.pool.wait(30)
    with served(create_app(services=services)) as base:
        yield base, services


def _post(base: str, key: str, customer: str, text: str, timeout: float = 120) -> tuple[int, float, dict]:
    t0 = time.monotonic()
    r = httpx.post(f"{base}/v1/messages", timeout=timeout, headers={"Authorization": f"Bearer {key}"},
                   json={"channel": "web", "conversation_id": f"conv-{customer}", "customer_id": customer,
                         "message_id": f"m-{customer}", "text": text})
    return r.status_code, time.monotonic() - t0, r.json() if r.content else {}


def _greeting_under(base: str, key: str, text: str, tag: str) -> tuple[int, float, list[tuple]]:
    """Ten messages ``text`` at once from ten customers, and a greeting from another one while they run."""
    results: dict[str, tuple] = {}

    def one(k: int) -> None:
        results[k] = _post(base, key, f"{tag}-{k}", text)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(10)]
    for t in threads:
        t.start()
    time.sleep(0.05)    # the ten are in flight
    status, took, _ = _post(base, key, f"{tag}-someone-else", "hello, good morning", timeout=30)
    for t in threads:
        t.join(120)
    return status, took, list(results.values())


# Wall time on a shared machine measures the machine. What the detector must not do is cost: the process's CPU
# time for the ten worst-case turns is held to a few times that of ten turns of the same length without digits
# (a quadratic detector took ~50 s each).
def test_ten_worst_case_messages_at_once_cost_about_what_ten_long_messages_cost_and_a_greeting_is_answered(live):
    base, services = live
    key = issue_integration_key(services.pool, ["web"])
    # warm the route once (the first turn loads what it loads) so the figures measure the turns
    assert _post(base, key, "warm", "hello")[0] == 200
    cpu = time.process_time()
    status, took, results = _greeting_under(base, key, WORST, "attacker")
    worst_cpu = time.process_time() - cpu
    assert len(results) == 10 and all(200 <= r[0] < 300 for r in results), results
    assert 200 <= status < 300, "the greeting was not answered while the ten ran"
    cpu = time.process_time()
    _, plain, _ = _greeting_under(base, key, "I want to talk to a human " + "a " * 800, "plain")
    plain_cpu = time.process_time() - cpu
    # measured 3.0 vs 1.1 s (the worst-case text runs the knowledge base's encoder too); the old detector: ~500 s
    assert worst_cpu < 3 * plain_cpu + 2.0, {"worst_cpu_s": round(worst_cpu, 2), "plain_cpu_s": round(plain_cpu, 2),
                                             "greeting_s": round(took, 2), "plain_greeting_s": round(plain, 2)}


LONG_QUESTION = ("Hello, I have a question about paying, please read all of this. " * 3
                 + " ".join(f"detail {i % 10}" for i in range(400)) + " Which payment methods do you accept?")


def test_a_long_message_is_encoded_before_its_turn_takes_a_connection(services, tmp_path):
    """What costs a long message its time (the encoder, bounded to its first tokens) runs in the pipeline's
    prepare step, before a pooled connection is taken: inside the turn every encoding is already cached."""
    from router.schemas import InboundMessage

    wire_gateway(services, tmp_path)
    cache, pipeline = services.encoder, services.pipeline
    prepare = pipeline.prepare
    assert prepare is not None and len(LONG_QUESTION) > 2000

    def route(customer: str, text: str, prepared: bool) -> tuple[int, int, dict]:
        """(encodings before the turn, encodings inside the turn, response)"""
        msg = InboundMessage(channel="web", conversation_external_id=f"c-{customer}", customer_id=customer,
                             message_external_id=f"m-{customer}", text=text)
        before = cache.misses
        if prepared:
            prepare(msg)
        middle = cache.misses
        pipeline.prepare = None             # only the turn itself from here
        try:
            response, _ = pipeline.handle(msg)
        finally:
            pipeline.prepare = prepare
        return middle - before, cache.misses - middle, response

    route("warm", "which payment methods do you accept?", True)      # the passages' own questions met once
    outside, inside, response = route("long", LONG_QUESTION, True)
    assert outside >= 1 and inside == 0, (outside, inside)
    assert response["turn_id"] and response["reply"] is not None      # routed and answered
    # the same kind of message unprepared encodes inside the turn: the check above can fail
    _, unprepared, _ = route("long-2", LONG_QUESTION.replace("question", "query"), False)
    assert unprepared >= 1
    # and the encoder saw the message's first tokens only
    assert len(cache.bounded(LONG_QUESTION)) < len(LONG_QUESTION) / 4


def test_long_turns_take_at_most_their_share_of_the_pool(services, tmp_path):
    """Turns of long messages hold at most ``heavy_slots`` pooled connections at once: one more waits holding
    nothing and is refused (429, nothing stored) when no slot frees in time; a short message is never held up."""
    from router.problems import Problem
    from router.schemas import InboundMessage

    wire_gateway(services, tmp_path)
    pipeline = services.pipeline
    assert pipeline.heavy is not None          # the composition root bounds them (half the pool)

    def msg(customer: str, text: str) -> InboundMessage:
        return InboundMessage(channel="web", conversation_external_id=f"c-{customer}", customer_id=customer,
                              message_external_id=f"m-{customer}", text=text)

    slots = 0
    while pipeline.heavy.acquire(blocking=False):     # every slot taken, as by long turns in flight
        slots += 1
    assert slots == services.settings.db_pool_max // 2
    pipeline.HEAVY_WAIT_SECONDS = 0.2
    try:
        with pytest.raises(Problem) as refused:
            pipeline.handle(msg("long", LONG_QUESTION))
        assert refused.value.status == 429 and refused.value.extra["headers"]["Retry-After"] == "2"
        response, _ = pipeline.handle(msg("short", "hello, good morning"))     # a chat message is not held up
        assert response["reply"] is not None
    finally:
        for _ in range(slots):
            pipeline.heavy.release()
        del pipeline.HEAVY_WAIT_SECONDS
    with services.pool.connection() as conn:
        stored = [r["text"] for r in conn.execute("SELECT text FROM messages WHERE direction = 'in'").fetchall()]
    assert stored == ["hello, good morning"]
    response, _ = pipeline.handle(msg("long", LONG_QUESTION))      # with a free slot the same message is routed
    assert response["reply"] is not None


def test_turns_waiting_for_a_long_message_slot_hold_no_pass_slot(services, tmp_path):
    """A crowd of long messages waiting for their share of the pool keeps none of the pipeline's slots for turns
    holding a connection (router.turn.passes.pass_slots): a short message arriving behind as many of them as
    there are slots is routed at once, and the long ones are routed once their slots free."""
    from router.schemas import InboundMessage
    from router.turn.passes import pass_slots

    wire_gateway(services, tmp_path)
    pipeline = services.pipeline
    assert pipeline.heavy is not None and pipeline.passes is not None
    assert pipeline.passes.size == pass_slots(services.settings.db_pool_max) > pipeline.heavy.size

    def msg(customer: str, text: str) -> InboundMessage:
        return InboundMessage(channel="web", conversation_external_id=f"c-{customer}", customer_id=customer,
                              message_external_id=f"m-{customer}", text=text)

    held = 0
    while pipeline.heavy.acquire(blocking=False):     # every long-message slot taken, as by long turns in flight
        held += 1
    results: dict[str, object] = {}
    pipeline.HEAVY_WAIT_SECONDS = 120.0     # the long ones wait for the test's slots, however slow the machine

    def route(name: str, text: str) -> None:
        try:
            results[name] = pipeline.handle(msg(name, text))[0]
        except Exception as exc:      # noqa: BLE001 - reported by the assertions below
            results[name] = exc

    waiting = [threading.Thread(target=route, args=(f"long-{i}", LONG_QUESTION)) for i in range(pipeline.passes.size)]
    try:
        for t in waiting:
            t.start()
        deadline = time.monotonic() + 30
        while len(pipeline.heavy._new) < len(waiting) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(pipeline.heavy._new) == len(waiting)       # all of them wait for a long-message slot
        short = threading.Thread(target=route, args=("short", "hello, good morning"))
        short.start()
        short.join(30)
        assert not short.is_alive(), "a short message waited behind long ones waiting for their slots"
        assert isinstance(results["short"], dict) and results["short"]["reply"] is not None
    finally:
        for _ in range(held):
            pipeline.heavy.release()
        for t in waiting:
            t.join(300)
        del pipeline.HEAVY_WAIT_SECONDS
    assert all(isinstance(results[f"long-{i}"], dict) and results[f"long-{i}"]["turn_id"]
               for i in range(len(waiting))), results
