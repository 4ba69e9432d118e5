"""Fusion: weighted RRF and the convex combination of normalised scores."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag.fusion import convex, fuse, rrf
from rag.types import Hit


def ranking(ids, scores=None):
    scores = scores or [float(len(ids) - i) for i in range(len(ids))]
    return [Hit(chunk_id=c, score=s, rank=i + 1, scores={}) for i, (c, s) in enumerate(zip(ids, scores, strict=True))]


def test_rrf_sums_reciprocal_ranks():
    fused = rrf({"bm25": ranking(["a", "b", "c"]), "dense": ranking(["b", "c", "d"])}, k=60)
    got = {h.chunk_id: h.score for h in fused}
    assert got["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert got["a"] == pytest.approx(1 / 61)
    assert got["d"] == pytest.approx(1 / 63)
    assert [h.chunk_id for h in fused] == ["b", "c", "a", "d"]
    assert [h.rank for h in fused] == [1, 2, 3, 4]
    b = fused[0]
    assert b.scores["bm25_rank"] == 2 and b.scores["dense_rank"] == 1 and b.scores["rrf"] == b.score


def test_rrf_weights_let_the_stronger_retriever_lead():
    lists = {"bm25": ranking(["x", "y"]), "dense": ranking(["y", "x"])}
    assert rrf(lists, weights={"bm25": 1, "dense": 3})[0].chunk_id == "y"
    assert rrf(lists, weights={"bm25": 3, "dense": 1})[0].chunk_id == "x"


def test_convex_keeps_score_margins_that_ranks_lose():
    # BM25 barely prefers p over q; dense strongly prefers q: equal weights -> q wins on scores
    lists = {"bm25": ranking(["p", "q", "r"], [10.0, 9.9, 1.0]), "dense": ranking(["q", "r", "p"], [0.9, 0.5, 0.1])}
    assert convex(lists)[0].chunk_id == "q"
    fused = {h.chunk_id: h.score for h in convex(lists, norm="minmax")}
    assert fused["q"] == pytest.approx(0.5 * (9.9 - 1) / 9 + 0.5 * 1.0)
    assert fused["p"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.0)


def test_fuse_rejects_unknown_methods():
    with pytest.raises(ValueError):
        fuse({"bm25": []}, method="borda")
    with pytest.raises(ValueError):
        convex({"bm25": []}, norm="softmax")


ids = st.lists(st.sampled_from(list("abcdefghij")), unique=True, max_size=10)


@settings(max_examples=100, deadline=None)
@given(a=ids, b=ids, w=st.floats(0.1, 10), method=st.sampled_from(["rrf", "convex"]))
def test_fusion_is_a_deterministic_ranking_of_the_union(a, b, w, method):
    lists = {"bm25": ranking(a), "dense": ranking(b)}
    fused = fuse(lists, method=method, weights={"bm25": 1.0, "dense": w})
    assert sorted(h.chunk_id for h in fused) == sorted(set(a) | set(b))
    assert [h.rank for h in fused] == list(range(1, len(fused) + 1))
    assert all(x.score >= y.score for x, y in zip(fused, fused[1:], strict=False))
    again = fuse(lists, method=method, weights={"bm25": 1.0, "dense": w})
    assert [h.chunk_id for h in again] == [h.chunk_id for h in fused]
    both = set(a) & set(b)
    if method == "rrf" and a and both:
        # an item ranked first by both retrievers is first after fusion
        if a[0] == (b[0] if b else None):
            assert fused[0].chunk_id == a[0]
