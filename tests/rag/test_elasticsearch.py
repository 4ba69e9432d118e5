"""The Elasticsearch lexical backend's calls, through the official client.

Where it runs: against a real cluster when ``SWITCHBOARD_TEST_ELASTICSEARCH_URL`` is set;
otherwise against ``noida-db`` (PyPI), started here on a free loopback port. noida-db is an
EMULATOR of the Elasticsearch REST API: it checks the API contract (request shapes, alias
actions, bulk responses, analysis settings) and nothing more. It says nothing about real BM25
scores, relevance at scale, cluster behaviour or performance. Assertions that need something the
emulator lacks (analysis plugins) are skipped on the emulator only, with the reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.elasticsearch

es_mod = pytest.importorskip("elasticsearch")

from rag.lexical.base import LexicalIndex  # noqa: E402
from rag.lexical.elasticsearch import ElasticsearchError, ElasticsearchIndex  # noqa: E402
from rag.types import Chunk  # noqa: E402

REAL_URL = os.environ.get("SWITCHBOARD_TEST_ELASTICSEARCH_URL")


def _noida_binary() -> str | None:
    """The server binary itself (the ``noida-db`` console script is a wrapper whose child would outlive it)."""
    try:
        from importlib.resources import files

        exe = files("noida_db").joinpath("noida-db")
    except ModuleNotFoundError:
        return None
    if not exe.is_file():
        return None
    path = Path(str(exe))
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(url, is_emulator). The emulator process is ours: started here, stopped by its pid."""
    if REAL_URL:
        yield REAL_URL, False
        return
    binary = _noida_binary()
    if binary is None:
        pytest.skip("noida-db is not installed (pip install -e '.[test]') and no real cluster is configured")
    data = tmp_path_factory.mktemp("noida")
    port = _free_port()
    log = open(data / "noida.log", "wb")
    proc = subprocess.Popen(
        [binary, "start", "--data-dir", str(data / "db"), "--host", "127.0.0.1",
         "--only", "elasticsearch", "--elasticsearch-port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:   # wait for the port with a bare socket: the client would bench a refused node
            if proc.poll() is not None:
                pytest.fail(f"noida-db exited with {proc.returncode}: {(data / 'noida.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("noida-db did not listen within 20 s")
                time.sleep(0.05)
        with es_mod.Elasticsearch(url, request_timeout=5) as client:
            assert client.info()["tagline"] == "You Know, for Search"
        yield url, True
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def index(cluster):
    """A backend on an alias of this test's own; every index it made is deleted afterwards."""
    url, _ = cluster
    idx = ElasticsearchIndex(url, alias=f"sbtest-{uuid.uuid4().hex[:10]}")
    yield idx
    _cleanup(idx)


def _cleanup(idx: ElasticsearchIndex) -> None:
    # Clusters refuse wildcard deletes (action.destructive_requires_name): name every index.
    names = list(idx.client.indices.get_settings(index=f"{idx.alias}-*", allow_no_indices=True).body)
    if names:
        idx.client.indices.delete(index=",".join(names), ignore_unavailable=True)
    idx.close()


def _kb() -> list[Chunk]:
    return [
        Chunk("refund-zh#0", "refund-zh", "退款一般在审核通过后3-5个工作日原路退回。", title="退款时效",
              section="退款 > 时效", lang="zh", category="refund", source="kb/refund-zh.md"),
        Chunk("refund-en#0", "refund-en", "Refunds go back to the original payment method within 3-5 business days.",
              title="Refund timelines", section="Refunds > Timelines", lang="en", category="refund",
              source="kb/refund-en.md"),
        Chunk("ship-zh#0", "ship-zh", "普通快递一般48小时内发货，偏远地区可能延迟。", title="发货时间",
              section="物流", lang="zh", category="logistics", source="kb/ship-zh.md"),
        Chunk("ship-en#0", "ship-en", "Standard parcels ship within 48 hours; remote areas may take longer.",
              title="Shipping times", section="Logistics", lang="en", category="logistics",
              source="kb/ship-en.md", updated_at="2024-05-01"),
        Chunk("pwd-en#0", "pwd-en", "Reset your password from the sign-in page with the emailed link.",
              title="Password reset", section="Account", lang="en", category="account", source="kb/pwd-en.md"),
    ]


def _loaded(index: ElasticsearchIndex, generation: str = "g1") -> ElasticsearchIndex:
    index.create_generation(generation)
    assert index.add(generation, _kb()) == len(_kb())
    return index


def test_satisfies_the_lexical_protocol(index):
    assert isinstance(index, LexicalIndex)
    assert index.name == "elasticsearch"


def test_generation_index_has_the_cjk_bigram_analyzer(index, cluster):
    index.create_generation("g1")
    index.create_generation("g1")   # idempotent
    name = index.index_name("g1")
    settings = index.client.indices.get_settings(index=name).body[name]["settings"]["index"]
    chain = settings["analysis"]["analyzer"]["sb_text"]
    assert chain["tokenizer"] == "standard"
    assert chain["filter"] == ["cjk_width", "lowercase", "cjk_bigram"]
    mapping = index.client.indices.get_mapping(index=name).body[name]["mappings"]["properties"]
    assert mapping["text"]["analyzer"] == "sb_text"
    assert mapping["chunk_id"]["type"] == "keyword"
    tokens = [t["token"] for t in index.client.indices.analyze(
        index=name, analyzer="sb_text", text="申请退款 ＲＥＦＵＮＤ").body["tokens"]]
    assert tokens == ["申请", "请退", "退款", "refund"]   # bigrams, full width folded, lower-cased


def test_bulk_add_count_and_search_in_both_languages(index):
    _loaded(index)
    assert index.count("g1") == 5
    zh = index.search("退款多久到账", k=3, generation="g1")
    assert zh and zh[0].chunk_id == "refund-zh#0"
    assert zh[0].rank == 1 and zh[0].scores["bm25"] == pytest.approx(zh[0].score) and zh[0].score > 0
    assert zh[0].chunk is not None and zh[0].chunk.title == "退款时效" and zh[0].chunk.section == "退款 > 时效"
    en = index.search("how long does shipping take", k=3, generation="g1")
    assert en[0].chunk_id == "ship-en#0"
    assert en[0].chunk.updated_at == "2024-05-01"
    assert [h.rank for h in en] == list(range(1, len(en) + 1))
    assert all(a.score >= b.score for a, b in zip(en, en[1:]))


def test_lang_filter_and_k(index):
    _loaded(index)
    hits = index.search("refund 退款", k=10, generation="g1", lang="en")
    assert hits and {h.chunk.lang for h in hits} == {"en"}
    assert len(index.search("refund 退款 shipping 发货", k=2, generation="g1")) == 2
    assert index.search("refund", k=0, generation="g1") == []


@pytest.mark.parametrize("text", ['refund AND (title:', 'title: refund) OR', "refund* OR \\", '"unterminated', "+-&&||!(){}[]^~?:/", "   "])
def test_user_text_is_never_query_syntax(index, text):
    _loaded(index)
    hits = index.search(text, k=5, generation="g1")   # must not raise a parse error
    if "refund" in text:
        assert hits and hits[0].chunk_id == "refund-en#0"
    elif not text.strip():
        assert hits == []


def test_reindexing_the_same_chunk_is_idempotent(index):
    _loaded(index)
    assert index.add("g1", _kb()[:2]) == 2     # a retried bulk overwrites by chunk id
    assert index.count("g1") == 5


def test_delete_by_chunk_id(index):
    _loaded(index)
    assert index.delete("g1", ["refund-zh#0", "no-such-chunk"]) == 1
    assert index.count("g1") == 4
    assert all(h.chunk_id != "refund-zh#0" for h in index.search("退款", generation="g1"))
    assert index.delete("g1", []) == 0


def test_add_to_a_missing_generation_fails_clearly(index):
    with pytest.raises(ElasticsearchError, match="does not exist"):
        index.add("nope", _kb())


def test_alias_swap_is_atomic_and_generations_are_ordered(index):
    assert index.active() is None
    assert index.search("refund") == []          # nothing served yet: no hits, no error
    _loaded(index, "g1")
    index.activate("g1")
    assert index.active() == "g1"
    assert index.search("password")[0].chunk_id == "pwd-en#0"

    index.create_generation("g2")
    index.add("g2", [Chunk("pwd-en#1", "pwd-en", "Passwords are reset by email link.", title="Password", lang="en")])
    assert index.search("password")[0].chunk_id == "pwd-en#0"   # still serving g1 while g2 is built
    index.activate("g2")
    assert index.active() == "g2"
    holders = index.client.indices.get_alias(name=index.alias).body
    assert list(holders) == [index.index_name("g2")]            # exactly one index behind the alias
    assert [h.chunk_id for h in index.search("password")] == ["pwd-en#1"]
    assert index.generations() == ["g1", "g2"]

    index.activate("g1")                                         # rollback is the same swap
    assert index.active() == "g1" and index.search("password")[0].chunk_id == "pwd-en#0"

    with pytest.raises(ElasticsearchError, match="being served"):
        index.drop_generation("g1")
    index.drop_generation("g2")
    assert index.generations() == ["g1"]
    with pytest.raises(ElasticsearchError, match="does not exist"):
        index.activate("g2")
    assert index.active() == "g1"


@pytest.mark.parametrize("bad", ["", "G1", "../x", "a b", "-x", "x" * 101, "a*"])
def test_generation_names_are_validated(index, bad):
    with pytest.raises(ValueError):
        index.index_name(bad)


def test_constructor_validates_settings(cluster):
    url, _ = cluster
    with pytest.raises(ValueError):
        ElasticsearchIndex(url, analyzer="whitespace")
    with pytest.raises(ValueError):
        ElasticsearchIndex(url, alias="Upper")


@pytest.mark.parametrize("analyzer,plugin", [("smartcn", "analysis-smartcn"), ("ik", "analysis-ik")])
def test_plugin_analyzers(cluster, analyzer, plugin):
    """smartcn / IK are used only when the cluster has the plugin; otherwise a clear error, no half-made index."""
    url, emulator = cluster
    idx = ElasticsearchIndex(url, alias=f"sbtest-{uuid.uuid4().hex[:10]}", analyzer=analyzer)
    try:
        installed = {r.get("component") for r in idx.client.cat.plugins(format="json").body or []}
        if plugin not in installed:
            with pytest.raises(ElasticsearchError, match=plugin):
                idx.create_generation("g1")
            assert idx.generations() == []
            return
        if emulator:  # pragma: no cover - the emulator reports no plugins today
            pytest.skip(f"noida-db emulates no analysis plugins, so {plugin} cannot be exercised on it")
        idx.create_generation("g1")
        idx.add("g1", _kb())
        assert idx.search("退款多久到账", k=1, generation="g1")[0].chunk_id == "refund-zh#0"
    finally:
        _cleanup(idx)
