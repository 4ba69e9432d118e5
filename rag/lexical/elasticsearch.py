"""BM25 on an Elasticsearch cluster: the scale-out lexical backend.

One concrete index per generation (``<alias>-<generation>``) and one alias that names the
generation being served; ``activate`` moves the alias in a single ``update_aliases`` call, so
searches see either the old or the new generation, never a mix. Chinese needs an analyzer of its
own: by default CJK bigrams (built into every cluster); the smartcn or IK plugins when the
cluster has them. User text is only ever the ``query`` of ``multi_match`` (analysed as text),
never ``query_string`` syntax, so ``title:x AND (`` is just words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields
from typing import Any, Literal

from elasticsearch import Elasticsearch, NotFoundError, helpers

from rag.types import Chunk, Hit

Analyzer = Literal["cjk_bigram", "smartcn", "ik"]

# Analysis chains per analyzer setting. The default needs no plugin: the standard tokenizer emits
# CJK characters one by one, cjk_width folds full/half width, cjk_bigram pairs neighbours.
_ANALYSIS: dict[str, dict[str, Any]] = {
    "cjk_bigram": {
        "analyzer": {
            "sb_text": {"type": "custom", "tokenizer": "standard",
                        "filter": ["cjk_width", "lowercase", "cjk_bigram"]},
        },
    },
    "smartcn": {
        "analyzer": {
            "sb_text": {"type": "custom", "tokenizer": "smartcn_tokenizer",
                        "filter": ["cjk_width", "lowercase"]},
        },
    },
    "ik": {  # finest split at index time, smart split for queries (the plugin's documented pairing)
        "analyzer": {
            "sb_text": {"type": "custom", "tokenizer": "ik_max_word", "filter": ["cjk_width", "lowercase"]},
            "sb_query": {"type": "custom", "tokenizer": "ik_smart", "filter": ["cjk_width", "lowercase"]},
        },
    },
}
_PLUGINS = {"smartcn": "analysis-smartcn", "ik": "analysis-ik"}

_GENERATION_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_ALIAS_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_CHUNK_FIELDS = tuple(f.name for f in fields(Chunk))
SEARCH_FIELDS = ("title^2", "keywords^2", "section", "text")


class ElasticsearchError(RuntimeError):
    """The cluster refused a request or lacks something this backend needs (e.g. an analysis plugin)."""


class ElasticsearchIndex:
    """The LexicalIndex protocol over one alias on an Elasticsearch cluster.

    ``client`` is an ``Elasticsearch`` instance or a URL (the composition root passes the
    settings' URL; credentials belong in that URL or the client, never in code).
    """

    name = "elasticsearch"

    def __init__(
        self,
        client: Elasticsearch | str,
        *,
        alias: str = "switchboard-chunks",
        analyzer: Analyzer = "cjk_bigram",
        shards: int = 1,
        replicas: int = 0,
        bulk_chunk_size: int = 500,
        max_query_chars: int = 1000,
        request_timeout: float = 30.0,
    ):
        if analyzer not in _ANALYSIS:
            raise ValueError(f"analyzer must be one of {sorted(_ANALYSIS)}, not {analyzer!r}")
        if not _ALIAS_RE.match(alias):
            raise ValueError(f"alias {alias!r} is not a valid lower-case index name")
        self.client = (
            Elasticsearch(client, request_timeout=request_timeout) if isinstance(client, str) else client
        )
        self.alias = alias
        self.analyzer = analyzer
        self.shards = int(shards)
        self.replicas = int(replicas)
        self.bulk_chunk_size = int(bulk_chunk_size)
        self.max_query_chars = int(max_query_chars)

    # ------------------------------------------------------------------ names

    def index_name(self, generation: str) -> str:
        """The concrete index that holds ``generation``."""
        if not isinstance(generation, str) or not _GENERATION_RE.match(generation):
            raise ValueError(
                f"generation {generation!r} must be 1-100 chars of lower-case letters, digits, '.', '_' or '-'"
            )
        return f"{self.alias}-{generation}"

    def _generation_of(self, index: str) -> str:
        return index[len(self.alias) + 1:]

    # ------------------------------------------------------------------ schema

    def index_body(self) -> dict[str, Any]:
        """Settings and mappings of a generation's index (also what the tests check the cluster kept)."""
        analysis = _ANALYSIS[self.analyzer]
        text: dict[str, Any] = {"type": "text", "analyzer": "sb_text"}
        if "sb_query" in analysis["analyzer"]:
            text["search_analyzer"] = "sb_query"
        return {
            "settings": {
                "number_of_shards": self.shards,
                "number_of_replicas": self.replicas,
                "analysis": analysis,
            },
            "mappings": {
                "dynamic": False,   # new Chunk fields are kept in _source, not indexed
                "properties": {
                    "chunk_id": {"type": "keyword"},
                    "doc_id": {"type": "keyword"},
                    "text": text,
                    "title": dict(text),
                    "section": dict(text),
                    "keywords": dict(text),
                    "lang": {"type": "keyword"},
                    "category": {"type": "keyword"},
                    "source": {"type": "keyword", "index": False},
                    "updated_at": {"type": "keyword", "index": False},
                    "content_hash": {"type": "keyword"},
                },
            },
        }

    def _require_plugin(self) -> None:
        plugin = _PLUGINS.get(self.analyzer)
        if plugin is None:
            return
        rows = self.client.cat.plugins(format="json").body or []
        if not any(r.get("component") == plugin for r in rows):
            raise ElasticsearchError(
                f"analyzer {self.analyzer!r} needs the {plugin} plugin on every node of the cluster; "
                "install it or use the default analyzer 'cjk_bigram'"
            )

    # ------------------------------------------------------------------ LexicalIndex

    def create_generation(self, generation: str) -> None:
        index = self.index_name(generation)
        if self.client.indices.exists(index=index):
            return
        self._require_plugin()
        body = self.index_body()
        try:
            self.client.indices.create(index=index, settings=body["settings"], mappings=body["mappings"])
        except Exception as exc:  # a concurrent create of the same generation is fine
            if "resource_already_exists" not in str(exc):
                raise

    def add(self, generation: str, chunks: Iterable[Chunk]) -> int:
        index = self.index_name(generation)
        if not self.client.indices.exists(index=index):
            raise ElasticsearchError(f"generation {generation!r} does not exist; create_generation first")

        def actions() -> Iterator[dict[str, Any]]:
            for c in chunks:
                yield {"_op_type": "index", "_index": index, "_id": c.chunk_id, "_source": asdict(c)}

        written, errors = helpers.bulk(
            self.client, actions(), chunk_size=self.bulk_chunk_size, raise_on_error=False, stats_only=False,
            max_retries=3,   # 429 back-pressure; re-sending is safe because _id is the chunk id
        )
        if errors:
            raise ElasticsearchError(f"{len(errors)} chunks were rejected, first: {errors[0]}")
        self.client.indices.refresh(index=index)
        return int(written)

    def delete(self, generation: str, chunk_ids: Iterable[str]) -> int:
        index = self.index_name(generation)
        deleted = 0
        ops = ({"_op_type": "delete", "_index": index, "_id": cid} for cid in chunk_ids)
        for ok, item in helpers.streaming_bulk(
            self.client, ops, chunk_size=self.bulk_chunk_size, raise_on_error=False, ignore_status=(404,),
            max_retries=3,
        ):
            result = item.get("delete", {})
            if ok and result.get("result") == "deleted":
                deleted += 1
            elif result.get("status") != 404:
                raise ElasticsearchError(f"delete failed: {item}")
        self.client.indices.refresh(index=index)
        return deleted

    def count(self, generation: str) -> int:
        return int(self.client.count(index=self.index_name(generation))["count"])

    def activate(self, generation: str) -> None:
        index = self.index_name(generation)
        if not self.client.indices.exists(index=index):
            raise ElasticsearchError(f"generation {generation!r} does not exist")
        actions: list[dict[str, Any]] = []
        if self.client.indices.exists_alias(name=self.alias):
            # One request: every index of ours loses the alias and the new one gains it, atomically.
            actions.append({"remove": {"index": f"{self.alias}-*", "alias": self.alias}})
        actions.append({"add": {"index": index, "alias": self.alias}})
        resp = self.client.indices.update_aliases(actions=actions)
        if resp.body.get("errors"):
            raise ElasticsearchError(f"alias swap to {index} failed: {resp.body}")

    def active(self) -> str | None:
        try:
            holders = list(self.client.indices.get_alias(name=self.alias).body)
        except NotFoundError:
            return None
        if len(holders) != 1:
            raise ElasticsearchError(f"alias {self.alias!r} points at {sorted(holders)}; expected one index")
        return self._generation_of(holders[0])

    def search(self, query: str, k: int = 100, *, generation: str | None = None,
               lang: str | None = None) -> list[Hit]:
        text = (query or "").strip()[: self.max_query_chars]
        if not text or k <= 0:
            return []
        index = self.index_name(generation) if generation is not None else self.alias
        must = {"multi_match": {"query": text, "fields": list(SEARCH_FIELDS),
                                "type": "best_fields", "tie_breaker": 0.3}}
        filters = [{"term": {"lang": lang}}] if lang else []
        try:
            resp = self.client.search(
                index=index, query={"bool": {"must": [must], "filter": filters}}, size=int(k),
                track_total_hits=False,
            )
        except NotFoundError:
            if generation is None:
                return []          # nothing activated yet: an empty knowledge base answers nothing
            raise
        hits: list[Hit] = []
        for rank, h in enumerate(resp["hits"]["hits"], start=1):
            src = h.get("_source") or {}
            chunk = Chunk(**{k_: src[k_] for k_ in _CHUNK_FIELDS if k_ in src}) if "text" in src else None
            if chunk is not None:
                chunk.keywords = tuple(chunk.keywords or ())    # a JSON list in _source
            score = float(h["_score"] or 0.0)
            hits.append(Hit(chunk_id=h["_id"], score=score, rank=rank, chunk=chunk, scores={"bm25": score}))
        return hits

    def drop_generation(self, generation: str) -> None:
        if generation == self.active():
            raise ElasticsearchError(f"generation {generation!r} is being served; activate another one first")
        self.client.indices.delete(index=self.index_name(generation), ignore_unavailable=True)

    def generations(self) -> list[str]:
        resp = self.client.indices.get_settings(
            index=f"{self.alias}-*", name="index.creation_date", expand_wildcards="open", allow_no_indices=True
        )
        rows = []
        for index, body in resp.body.items():
            created = int(body.get("settings", {}).get("index", {}).get("creation_date", 0) or 0)
            rows.append((created, index))
        return [self._generation_of(i) for _, i in sorted(rows)]

    def close(self) -> None:
        self.client.close()
