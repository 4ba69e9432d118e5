"""The composition root: builds :class:`router.app.services.Services` and wires the components onto it.

Kept apart from ``services.py`` so each capability (encoder, classifier, retrieval,
handoff) adds its own small wiring function here without touching the plumbing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from router.app.services import Services, limit_threads, pool_options, resolve_dsn
from router.app.settings import Settings
from router.channels.registry import CHANNELS
from router.db import migrate, open_pool
from router.telemetry.metrics import Metrics

log = logging.getLogger(__name__)


def wire_encoder(services: Services) -> None:
    from rag.encoder_backends import QueryCache, load_encoder

    s = services.settings
    limit_threads(s.torch_threads)
    # one message is encoded by the classifier, the repeated-question check and retrieval: cache it
    services.encoder = QueryCache(load_encoder(s.embedding_model, s.models_dir, backend=s.embedding_backend,
                                               threads=s.torch_threads, query_backend=s.embedding_query_backend))


def wire_classifier(services: Services) -> None:
    """The intent classifier from settings.intents_file (or the bundled sample) and the shared encoder."""
    from router.classify.intents import BUNDLED_INTENTS, load_intents

    path = services.settings.intents_file or BUNDLED_INTENTS
    if services.settings.intents_file is None and not BUNDLED_INTENTS.is_file():
        log.warning("no intents file configured and no bundled sample: the classifier is not wired")
        return
    config = load_intents(path)
    services.classifier = classifier_from(config, services.encoder, services.settings.home)
    clf = services.classifier
    heads = services.settings.home / "cache" / "heads"
    home, encoder = services.settings.home, services.encoder

    def rebuild(config):
        # as at start: the examples' vectors and the fit come from their caches, so an unchanged file costs a moment
        return classifier_from(config, encoder, home)

    services.closers.append(on_sighup(lambda: clf.reload_file(path, cache_dir=heads, build=rebuild),
                                      name="intents-reload"))
    services.readiness["classifier"] = lambda: (True, f"{len(clf.config.intents)} intents from {path}")


def classifier_from(config, encoder, home: Path):
    """The intent classifier as the gateway builds it, shared with ``switchboard router classify``: the
    examples' vectors from the embedding cache and the trained heads from the heads cache under ``home``,
    so only the first start (or a changed intents file) encodes the examples."""
    from router.classify import IntentClassifier
    from router.classify.evaluate import EmbeddingCache

    example_vectors = oos_vectors = None
    if encoder is not None and any(i.examples for i in config.intents):
        cache = EmbeddingCache(Path(home) / "cache" / "embeddings")
        example_vectors = cache.encode(encoder, [e for i in config.intents for e in i.examples])
        if config.oos_examples:
            oos_vectors = cache.encode(encoder, list(config.oos_examples))
        config = _cached_fit(config, encoder, example_vectors, oos_vectors, Path(home) / "cache" / "fits")
    return IntentClassifier.from_config(config, encoder, example_vectors=example_vectors, oos_vectors=oos_vectors,
                                        cache_dir=Path(home) / "cache" / "heads")


def _cached_fit(config, encoder, example_vectors, oos_vectors, folder: Path):
    """The threshold fit that from_config would compute at every load, kept on disk per config and encoder."""
    import hashlib
    import json

    from router.classify import fit
    from router.classify.evaluate import encoder_key

    if not fit.needs_fit(config, encoder):
        return config
    payload = json.dumps([config.model_dump(mode="json"), encoder_key(encoder), fit.FIT_VERSION],
                         ensure_ascii=False, sort_keys=True, default=str)
    path = folder / f"load-{hashlib.sha256(payload.encode('utf-8')).hexdigest()[:32]}.json"
    if path.is_file():
        try:
            return config.model_copy(update=json.loads(path.read_text(encoding="utf-8")))
        except ValueError:
            pass
    fitted = fit.refit_config(config, example_vectors, oos_vectors, encoder_name=getattr(encoder, "name", None))
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"scoring": fitted.scoring, "threshold": fitted.threshold}), encoding="utf-8")
    tmp.replace(path)
    return fitted


def wire_handoff(services: Services) -> None:
    """The L2/L3 queue (policy from SWITCHBOARD_HANDOFF_*), its conversation-state port and the sweeper loop."""
    from handoff import HandoffService
    from handoff.sweeper import SweeperLoop
    from router.turn.state import ConversationStatePort

    metrics = services.metrics

    def count(name: str, labels: dict[str, str], value: float) -> None:
        if name == "ticket_event":
            metrics.tickets.labels(labels["kind"], labels["event"]).inc(value)
            if labels["event"] == "sla_breached":
                metrics.sla_breaches.labels(labels["kind"]).inc(value)
        elif name == "queue_depth":
            metrics.queue_depth.labels(labels["kind"], labels["priority"]).set(value)

    config = services.settings.handoff_config()
    services.handoff = HandoffService(services.pool, ConversationStatePort(), config, metrics_hook=count)
    sweeper = SweeperLoop(services.handoff, config.sweep_interval_seconds).start()
    services.closers.append(sweeper.stop)


def tools_configured(settings) -> bool:
    """Whether tools are on: SWITCHBOARD_TOOLS_ENABLED=false or SWITCHBOARD_TOOLS_FILE="" turn them off."""
    f = settings.tools_file
    return bool(settings.tools_enabled) and not (f is not None and str(f) in ("", "."))


def wire_flows(services: Services) -> None:
    """The tool gateway (personal data masked in its audit) and the workflow engine over it.

    By default the bundled tools file starts the example shop over MCP stdio with this gateway's
    database URL, so the shop keeps its data in schema ``shop`` of the same Postgres. The shop
    process starts on the first tool call. A broken tools or workflows file stops the start-up
    (``switchboard serve`` checks both first and names the file and line): a gateway without its tools
    would silently turn every task into a ticket.
    """
    from automation.tools import load_tool_gateway
    from automation.workflows.engine import FlowEngine
    from automation.workflows.spec import load_workflows
    from router.turn.flows import HandoffApprovals
    from text import personal

    s = services.settings
    if not tools_configured(s):
        return
    variables = dict(os.environ)
    variables["SWITCHBOARD_DATABASE_URL"] = services.dsn
    gateway = load_tool_gateway(s.tools_file, pool=services.pool, variables=variables,
                                redact=lambda v: personal.mask(v) or "")
    services.closers.append(gateway.close)
    workflows = load_workflows(s.workflows_file, tools=gateway)
    services.tools = gateway
    from handoff.queries import customer_tickets

    similarity = None
    if services.encoder is not None:   # an option chosen by meaning ("the pan please" for 不粘锅 28cm)
        from automation.workflows.meaning import EncoderSimilarity

        similarity = EncoderSimilarity(services.encoder)
        similarity.background()   # encoded now, not at a customer's first choice
    services.flows = FlowEngine(workflows, gateway, HandoffApprovals(lambda: services.handoff),
                                tickets=customer_tickets,   # earlier tickets in the session memory
                                similarity=similarity)
    if workflows.memory is not None and workflows.memory.calls:
        from router.app.stale_memory import StaleMemoryListener

        # another worker's write makes this process's kept copy of that customer stale
        services.closers.append(StaleMemoryListener(services.dsn).start().stop)
    if services.handoff is not None and hasattr(services.handoff.port, "flows"):
        services.handoff.port.flows = services.flows   # an approver's decision resumes the flow
    if services.handoff is not None:   # a ticket's session memory: loaded when an agent reads or claims it
        from router.turn.tiers.tickets import MemoryOnDemand

        services.handoff.memory_wanted = MemoryOnDemand(services.flows, services.handoff, services.pool.connection)
    engine = services.flows
    services.readiness["workflows"] = lambda: (True, f"{len(engine.workflows.names())} workflows, "
                                                     f"{len(engine.tools.names())} tools")
    if services.metrics is not None:
        services.metrics.allow_workflows_of(engine)
        from router.turn.passes import when_committed

        count_flow = services.metrics.count_flow
        # counted when the turn commits: a pass rolled back for a tool call starts the flow again
        engine.observer = lambda workflow, event: when_committed(lambda: count_flow(workflow, event))
    services.closers.append(on_sighup(lambda: reload_flows(services), name="workflows-reload"))


def reload_flows(services: Services) -> bool:
    """Re-read the tools and workflows files (SIGHUP, like the intents): both load or nothing changes.

    A broken file is logged as ``file:line: field: message`` and the running tools and workflows are
    kept; running flows keep the workflow version they started with. The old gateway is closed a
    minute later, after the calls in flight on it have finished.
    """
    import threading

    from automation.tools import load_tool_gateway
    from automation.workflows.spec import load_workflows
    from text import personal

    engine, s = services.flows, services.settings
    if engine is None:
        return False
    variables = dict(os.environ)
    variables["SWITCHBOARD_DATABASE_URL"] = services.dsn
    try:
        gateway = load_tool_gateway(s.tools_file, pool=services.pool, variables=variables,
                                    redact=lambda v: personal.mask(v) or "")
    except (ValueError, OSError) as exc:
        log.error("tools file not reloaded, keeping the running tools and workflows:\n%s", exc)
        return False
    try:
        workflows = load_workflows(s.workflows_file, tools=gateway)
    except (ValueError, OSError) as exc:
        gateway.close()
        log.error("workflows not reloaded, keeping the running tools and workflows:\n%s", exc)
        return False
    old = services.tools
    for warning in engine.reload(workflows, tools=gateway):
        log.warning(warning)
    services.tools = gateway
    services.closers.append(gateway.close)
    if old is not None and old is not gateway:
        timer = threading.Timer(60.0, old.close)
        timer.daemon = True
        timer.start()
    log.info("reloaded %d workflows and %d tools", len(workflows.names()), len(gateway.names()))
    return True


_reloaders: list[tuple[str, object]] = []


def on_sighup(fn, *, name: str):
    """Run ``fn`` in a thread on SIGHUP, with every other reload registered here: one signal reloads every file.

    Services are built in a worker thread at start-up, where no signal handler can be installed, so the
    functions go into a list and one handler (:func:`install_sighup`, installed by ``switchboard serve``
    in the main thread before the app starts, or here when called from the main thread) runs them all.
    Returns the function that takes ``fn`` off the list (a closed Services calls it)."""
    entry = (name, fn)
    _reloaders.append(entry)
    install_sighup()

    def remove() -> None:
        if entry in _reloaders:
            _reloaders.remove(entry)

    return remove


def _on_hup(signum, frame) -> None:
    import threading

    for name, fn in list(_reloaders):
        threading.Thread(target=fn, name=name, daemon=True).start()


def install_sighup() -> bool:
    """Install the SIGHUP handler that runs the registered reloads (the default action would end the
    process). Only the main thread may install handlers; elsewhere False."""
    import signal
    import threading

    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGHUP) is not _on_hup:
        signal.signal(signal.SIGHUP, _on_hup)
    return True


def make_knowledge_base(settings, pool, encoder, *, knowledge_dir=None, reranker=None, progress: bool = False):
    """A rag.service.KnowledgeBase configured from settings (used by wire_rag and the CLI).

    The glossary of the knowledge folder feeds query rewriting and the jieba dictionary, and the
    same tokenizer cuts indexed text and queries. tantivy under $SWITCHBOARD_HOME/index unless an
    Elasticsearch URL is set.
    """
    from rag.rewrite import get_tokenizer, load_glossary
    from rag.service import SAMPLE_KB, KnowledgeBase

    folder = knowledge_dir or settings.knowledge_dir or SAMPLE_KB
    glossary = load_glossary(folder if Path(folder).is_dir() else None)   # a single-file source has none
    tokenizer = get_tokenizer(glossary.words())
    es_url = settings.elasticsearch_dsn()
    if es_url:
        from rag.lexical.elasticsearch import ElasticsearchIndex

        kwargs = {}
        if getattr(settings, "elasticsearch_analyzer", None):
            kwargs["analyzer"] = settings.elasticsearch_analyzer
        lexical = ElasticsearchIndex(es_url, **kwargs)
    else:
        from rag.lexical.tantivy import TantivyIndex

        lexical = TantivyIndex(settings.index_dir / "tantivy", tokenizer=tokenizer)
    generator = None
    if settings.rag_generator_url:
        from rag.answer import OpenAIChatGenerator

        key = settings.rag_generator_api_key.get_secret_value() if settings.rag_generator_api_key else None
        generator = GuardedGenerator(
            OpenAIChatGenerator(settings.rag_generator_url, settings.rag_generator_model or "default", api_key=key,
                                timeout=settings.rag_generator_timeout_seconds),
            max_concurrent=settings.rag_generator_concurrency)
    from rag.config import load_calibration

    calibration = load_calibration(folder if Path(folder).is_dir() else None, Path(str(settings.embedding_model)).name)
    config = settings.retrieval_config(calibration)
    return KnowledgeBase(pool, encoder, lexical, config=config, glossary=glossary, reranker=reranker,
                         generator=generator, sample_dir=folder, progress=progress)


class GuardedGenerator:
    """The optional answer generator as a third party should see it: redacted, bounded, never in the transaction.

    Generation takes seconds, so it never runs with the conversation locked or a pooled connection held:
    inside a turn the call goes through :func:`router.turn.passes.outside_transaction` (the pipeline
    decides once, rolls back, generates with nothing held, and decides again under the lock; the
    generated text is used only if that decision asks for it with the same question and passages, and
    the knowledge base still checks every sentence against them). The question goes out with personal
    data masked (router.telemetry.logs), the HTTP call has its own timeout
    (SWITCHBOARD_RAG_GENERATOR_TIMEOUT_SECONDS), and at most SWITCHBOARD_RAG_GENERATOR_CONCURRENCY calls
    run at once; when every slot is taken the turn does not wait: the extractive answer stands.
    """

    def __init__(self, inner, *, max_concurrent: int):
        import threading

        self.inner = inner
        self.max_concurrent = max(1, max_concurrent)
        self._lock = threading.Lock()
        self.in_use = 0

    def _free(self) -> bool:
        return self.in_use < self.max_concurrent

    def _call(self, masked: str, passages) -> str:
        with self._lock:
            if self.in_use >= self.max_concurrent:
                raise TimeoutError("every generator slot is busy: the extractive answer stands")
            self.in_use += 1
        try:
            return self.inner.generate(masked, passages)
        finally:
            with self._lock:
                self.in_use -= 1

    def generate(self, query: str, passages) -> str:
        from router.telemetry.logs import redact
        from router.turn.passes import PENDING, NotComputed, outside_transaction

        masked = redact(query) or ""
        key = ("generator", masked,
               tuple((h.chunk_id, getattr(getattr(h, "chunk", None), "text", None)) for h in passages))
        try:
            text = outside_transaction(key, lambda: self._call(masked, passages), available=self._free)
        except NotComputed:
            if not self._free():
                raise TimeoutError("every generator slot is busy: the extractive answer stands") from None
            raise TimeoutError("no generated answer for this evidence: the extractive answer stands") from None
        return "" if text is PENDING else text

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


def make_reranker(settings, model_dir=None):
    """The cross-encoder reranker in ``model_dir`` (default: settings.reranker_model), or None when unset."""
    model_dir = model_dir or settings.reranker_model
    if not model_dir:
        return None
    from rag.encoder_backends import bf16_supported
    from rag.rerank import CrossEncoderReranker

    # the encoder's arithmetic choice holds for the reranker: bf16 scores as fp32 does, at ~1.8x
    bf16 = settings.embedding_backend in ("auto", "torch-bf16") and bf16_supported()
    return CrossEncoderReranker(model_dir, threads=settings.torch_threads, bf16=bf16)


def wire_rag(services: Services) -> None:
    """The knowledge base for L1; indexes the sample (or configured) KB on first start when empty."""
    s = services.settings
    # Retrieval runs inside a turn whose transaction already holds a connection of the main pool;
    # its own pool means a burst of turns can never starve itself waiting for a second connection.
    rag_pool = open_pool(services.dsn, min_size=1, max_size=s.db_pool_max, name="switchboard-rag",
                         **pool_options(s))
    services.closers.append(rag_pool.close)
    kb = make_knowledge_base(s, rag_pool, services.encoder, reranker=make_reranker(s))
    services.rag = kb
    services.readiness["indexes"] = kb.ready
    closer = getattr(kb.lexical, "close", None)
    if closer is not None:
        services.closers.append(closer)
    if s.load_sample_kb and kb.is_empty():
        summary = kb.load_sample_if_empty()
        if summary:
            log.info("indexed the knowledge base", extra={"fields": {
                k: summary.get(k) for k in ("generation", "docs", "chunks", "seconds")}})
    if s.rag_warm_answers and not kb.is_empty():
        services.readiness["composition"] = _warm_in_background(kb)


def _warm_in_background(kb) -> Callable[[], tuple[bool, str]]:
    """Encode the knowledge base's lines for answer composition once, off the request path, so that no
    customer's first question about an article waits for it (rag.service.KnowledgeBase.warm). Returns the
    readiness check that shows its progress: never failing (composition encodes what it lacks on first use),
    but an operator, or a benchmark that measures the steady state, can see the encoder is still busy."""
    import threading

    state = {"done": 0, "total": 0, "end": ""}

    def progress(done: int, total: int) -> None:
        state["done"], state["total"] = done, total

    def warm() -> None:
        try:
            n = kb.warm(progress=progress)
            state["end"] = f"ready: {n} lines encoded"
            log.info("answer composition ready", extra={"fields": {"lines": n}})
        except Exception:  # noqa: BLE001 - composition encodes lazily instead
            state["end"] = "warming failed: lines are encoded on first use"
            log.warning("answer composition could not warm up; lines are encoded on first use", exc_info=True)

    def check() -> tuple[bool, str]:
        return True, state["end"] or f"warming: {state['done']} of {state['total'] or '?'} texts encoded"

    threading.Thread(target=warm, name="kb-warm", daemon=True).start()
    return check


def wire_router(services: Services) -> None:
    """The routing pipeline: harness, classifier, escalation, state machine, then rag / handoff by tier."""
    from router.turn.decider import Decider
    from router.turn.escalation import load_policy
    from router.turn.admission import Admission
    from router.turn.passes import pass_slots
    from router.turn.pipeline import Pipeline

    if services.classifier is None:
        log.error("no classifier is wired: messages are stored but not routed")
        return
    services.metrics.allow_intents_of(services.classifier)
    policy = load_policy(services.settings.policy_file)
    decider = Decider(policy=policy, classifier=services.classifier, rag=services.rag, handoff=services.handoff,
                      encoder=services.encoder, metrics=services.metrics, flows=services.flows)
    services.pipeline = Pipeline(services.pool, services.metrics, decider, owner=conversation_owner(services.settings),
                                 admission=Admission(services.pool, policy.harness.quota, services.metrics),
                                 prepare=decider.prepare, heavy_slots=max(1, services.settings.db_pool_max // 2),
                                 deadline=services.settings.turn_deadline_seconds, ahead=decider.ahead,
                                 pass_slots=pass_slots(services.settings.db_pool_max))


def conversation_owner(settings):
    """What another customer's message into a conversation does, per channel (settings.conversation_owner*)."""
    by_channel = dict(settings.conversation_owner_by_channel)
    return lambda channel: by_channel.get(channel, settings.conversation_owner)


def wire_dispatcher(services: Services) -> None:
    """The outbox dispatcher as a leader-elected background loop (off with SWITCHBOARD_DISPATCHER_ENABLED=false)."""
    from router.outbox import DispatcherLoop, build_dispatcher

    s = services.settings
    if not s.dispatcher_enabled:
        return
    dispatcher = build_dispatcher(s, services.pool, services.metrics)
    loop = DispatcherLoop(services.dsn, dispatcher, poll_seconds=s.outbox_poll_seconds)
    services.dispatcher = loop
    services.readiness["dispatcher"] = lambda: (True, "leader" if loop.is_leader else "standby")
    loop.start()

    def stop() -> None:
        loop.stop()
        dispatcher.close()

    services.closers.append(stop)


def wire_inbound(services: Services) -> None:
    """The inbound worker: finishes messages a channel was acknowledged before their turn committed."""
    from router.channels.inbound_queue import InboundWorker

    def process(channel: str, parsed) -> None:
        from router.app.api.channels import gateway

        gw = gateway(services)
        adapter = gw.adapter(channel)
        if adapter is None:
            raise LookupError(f"no adapter for the held message's channel {channel!r}")
        gw.process(adapter, parsed)

    worker = InboundWorker(services.pool, process, poll_seconds=services.settings.inbound_poll_seconds).start()
    services.closers.append(worker.stop)
    services.inbound = worker


def wire_components(services: Services) -> None:
    wire_encoder(services)
    wire_classifier(services)
    wire_handoff(services)
    wire_flows(services)
    wire_rag(services)
    wire_router(services)  # keep last: it composes the parts wired above
    wire_dispatcher(services)
    wire_inbound(services)


def build_services(settings: Settings, *, load_models: bool = True) -> Services:
    """Start (or reach) the database, migrate, open the pool and load what the app needs."""
    if load_models:   # a one-off command without models does not import torch (wire_encoder sets them then)
        limit_threads(settings.torch_threads)
    from text import personal

    personal.configure(settings.phone_regions)
    if load_models:   # the gateway: loaded before the first message (a one-off command loads it if it masks)
        personal.warm_up()
    dsn, embedded, started = resolve_dsn(settings)
    applied = migrate(dsn)
    if applied:
        log.info("applied migrations", extra={"fields": {"migrations": [f"{m.version:04d}_{m.name}" for m in applied]}})
    # a gateway keeps its connections ready; a one-off command (no models) needs only what it uses
    pool = open_pool(dsn, min_size=settings.db_pool_min if load_models else 1, max_size=settings.db_pool_max,
                     **pool_options(settings))
    services = Services(settings=settings, dsn=dsn, pool=pool, metrics=Metrics(channels=CHANNELS), embedded=embedded,
                        owns_embedded=started)
    if load_models:
        wire_components(services)
    return services
