"""The embedding channel on a real (small) encoder: in scope, far out of scope, explanations, fitting."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import numpy as np
import pytest

from router.classify import IntentClassifier
from router.classify.evaluate import read_jsonl
from router.classify.fit import config_from_rows, fit_scoring, needs_fit, refit_config
from router.classify.intents import load_intents, parse_intents

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "intents_small"


@pytest.fixture(scope="module")
def train_rows():
    return read_jsonl(FIXTURE / "train.jsonl")


@pytest.fixture(scope="module")
def fitted(minilm_encoder, train_rows):
    """A config built and fitted from the fixture's TRAIN rows, and its classifier."""
    config = config_from_rows(train_rows)
    vectors = minilm_encoder.encode_queries([e for i in config.intents for e in i.examples])
    oos = minilm_encoder.encode_queries(config.oos_examples)
    config = refit_config(config, vectors, oos, encoder_name=minilm_encoder.name)
    return config, IntentClassifier.from_config(config, minilm_encoder, example_vectors=vectors, oos_vectors=oos)


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("where is my package, it has not arrived", "track_order"),
        ("I would like my money refunded", "refund"),
        ("what time does the shop open on saturday", "store_hours"),
        ("can I pay using my visa card", "payment_methods"),
    ],
)
def test_in_scope_messages_are_classified(fitted, text, intent):
    _, clf = fitted
    c = clf.classify(text)
    assert c.decided_by == "embeddings"
    assert c.intent == intent, c.explanation
    assert c.tier == "L1"
    assert c.confidence >= c.explanation["threshold"]


@pytest.mark.parametrize("text", ["how many moons does jupiter have", "write a poem about autumn leaves",
                                  "what is the boiling point of water"])
def test_far_out_of_scope_is_unknown(fitted, text):
    config, clf = fitted
    c = clf.classify(text)
    assert c.intent is None, c.explanation
    assert c.tier == config.unknown_tier
    assert c.confidence < c.explanation["threshold"]


def test_explanation_has_nearest_examples_threshold_and_margin(fitted):
    config, clf = fitted
    c = clf.classify("has my parcel shipped yet?")
    why = c.explanation
    assert why["channel"] == "embeddings" and why["method"] == "head+knn"
    assert why["threshold"] == pytest.approx(config.threshold, abs=1e-4)
    assert why["candidate"] == c.intent == "track_order"
    assert why["runner_up"] in config.names and why["runner_up"] != why["candidate"]
    assert 0.0 < why["margin"] <= 1.0
    nearest = why["nearest"]
    assert len(nearest) == 5
    assert [n["score"] for n in nearest] == sorted((n["score"] for n in nearest), reverse=True)
    assert nearest[0]["intent"] == "track_order"
    examples = {e for i in config.intents for e in i.examples}
    assert all(n["example"] in examples for n in nearest)
    assert set(why["signals"]) >= {"p_top", "cos_top", "cos_margin"}
    assert 0.0 <= c.confidence <= 1.0


def test_nearest_scores_are_the_true_cosines(fitted, minilm_encoder):
    _, clf = fitted
    text = "cancel the order I placed this morning"
    c = clf.classify(text)
    q = minilm_encoder.encode_queries([text])[0]
    for n in c.explanation["nearest"]:
        v = minilm_encoder.encode_queries([n["example"]])[0]
        assert n["score"] == pytest.approx(float(q @ v), abs=2e-3)


def test_hand_written_threshold_uses_nearest_cosine(minilm_encoder):
    config = parse_intents(textwrap.dedent("""\
        version: 1
        threshold: 0.55
        intents:
          - name: track
            tier: L1
            examples: [where is my parcel, track my package]
          - name: refund
            tier: L2
            threshold: 0.9
            examples: [I want my money back, refund my purchase]
        """))
    assert needs_fit(config, minilm_encoder) is None
    clf = IntentClassifier.from_config(config, minilm_encoder)
    c = clf.classify("where is my parcel")  # identical to an example: cosine 1
    assert c.intent == "track" and c.confidence == pytest.approx(1.0, abs=1e-4)
    assert c.explanation["method"] == "knn" and c.explanation["threshold"] == 0.55
    c = clf.classify("please give me my money back")  # close to refund, below its own 0.9 threshold
    assert c.explanation["candidate"] == "refund" and c.explanation["threshold"] == 0.9
    assert c.intent is None and c.tier == "L2"
    assert c.confidence == pytest.approx(c.explanation["nearest"][0]["score"], abs=1e-4)


def test_fitting_is_deterministic_and_reads_only_what_it_is_given(minilm_encoder, train_rows):
    texts = [r.text for r in train_rows]
    labels = [r.intent for r in train_rows]
    vectors = minilm_encoder.encode_queries(texts)
    a = fit_scoring(vectors, texts, labels)
    b = fit_scoring(vectors.copy(), list(texts), list(labels))
    assert a.threshold == b.threshold and a.scoring.rejector == b.scoring.rejector
    assert a.cv["kinds"]["oos"] == 10 and a.cv["kinds"]["held_out_intent"] == 0  # real oos rows: no held-out
    assert 0.0 < a.threshold < 1.0


def test_without_oos_rows_held_out_intents_stand_in(minilm_encoder, train_rows):
    rows = [r for r in train_rows if r.intent != "oos"]
    texts = [r.text for r in rows]
    vectors = minilm_encoder.encode_queries(texts)
    result = fit_scoring(vectors, texts, [r.intent for r in rows])
    assert result.cv["kinds"]["oos"] == 0
    assert result.cv["kinds"]["held_out_intent"] == len(rows)  # each intent held out once
    assert set(result.cv["oos_recall"]) == {"held_out_intent"}


def test_unfitted_config_is_fitted_at_load_and_refitted_for_another_encoder(minilm_encoder, train_rows):
    config = config_from_rows(train_rows)
    assert config.threshold is None and needs_fit(config, minilm_encoder)
    clf = IntentClassifier.from_config(config, minilm_encoder)
    assert clf.config.threshold is not None and clf.config.scoring["encoder"] == minilm_encoder.name
    stale = clf.config.model_copy(update={"scoring": {**clf.config.scoring, "encoder": "another-encoder"}})
    assert "another-encoder" in needs_fit(stale, minilm_encoder)
    refitted = IntentClassifier.from_config(stale, minilm_encoder)
    assert refitted.config.scoring["encoder"] == minilm_encoder.name


def test_batch_equals_single_and_head_cache_round_trips(fitted, minilm_encoder, tmp_path):
    config, clf = fitted
    texts = ["where is my order", "tell me about black holes", "reset my password please", "退款"]
    batch = clf.classify_batch(texts)
    single = [clf.classify(t) for t in texts]
    assert [c.intent for c in batch] == [c.intent for c in single]
    assert np.allclose([c.confidence for c in batch], [c.confidence for c in single], atol=1e-5)
    cached = IntentClassifier.from_config(config, minilm_encoder, cache_dir=tmp_path)
    assert list(tmp_path.glob("*.npz")) and list(tmp_path.glob("*.sha256")), "the trained head was written to the cache"
    assert not list(tmp_path.glob("*.pkl"))
    again = IntentClassifier.from_config(config, minilm_encoder, cache_dir=tmp_path)
    for t in texts:
        assert again.classify(t).confidence == pytest.approx(cached.classify(t).confidence, abs=1e-6)


class _Plant:
    """Unpickling this creates a file: proof that a cache entry ran code while being loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_planted_cache_entry_never_runs_code(fitted, minilm_encoder, tmp_path):
    """Caches under $SWITCHBOARD_HOME/cache were loaded with pickle: whoever could write there ran code in the
    gateway. An entry carrying a pickled object, even with a matching digest, is rebuilt and never unpickled."""
    config, _ = fitted
    cache = tmp_path / "cache"
    first = IntentClassifier.from_config(config, minilm_encoder, cache_dir=cache)
    [entry] = cache.glob("*.npz")
    marker = tmp_path / "code-ran"
    with entry.open("wb") as f:
        np.savez(f, C=np.array([_Plant(marker)], dtype=object), lexical=np.array([_Plant(marker)], dtype=object))
    entry.with_suffix(".sha256").write_text(hashlib.sha256(entry.read_bytes()).hexdigest() + "\n")
    again = IntentClassifier.from_config(config, minilm_encoder, cache_dir=cache)
    assert not marker.exists()
    assert again.classify("where is my order").confidence == pytest.approx(
        first.classify("where is my order").confidence, abs=1e-6)
    with np.load(entry, allow_pickle=False) as z:     # rebuilt: arrays only again
        assert float(z["C"][0]) > 0


def test_reload_swaps_the_config(fitted, minilm_encoder):
    config, _ = fitted
    clf = IntentClassifier.from_config(config, minilm_encoder)
    changed = config.model_copy(update={"intents": [i.model_copy(update={"tier": "L3"}) if i.name == "refund" else i
                                                    for i in config.intents]})
    clf.reload(changed)
    assert clf.tier_of("refund") == "L3" and clf.classify("I want a refund").tier == "L3"


def test_wire_classifier_builds_from_the_bundled_sample(services):
    from router.app.composition import wire_classifier

    wire_classifier(services)
    clf = services.classifier
    assert clf is not None and clf.config.names == load_intents().names
    assert services.readiness["classifier"]()[0] is True
    c = clf.classify("转人工")
    assert c.intent == "human_agent" and c.tier == "L3" and c.decided_by == "rules"
    c = clf.classify("what's the airspeed velocity of an unladen swallow")
    assert c.decided_by == "embeddings" and "nearest" in c.explanation


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("我的快递怎么还没到，都一周了", {"shipping", "shipping_status", "order_query"}),
        ("has my order been confirmed", {"order_query"}),
        ("怎么开电子发票", {"invoice", "faq"}),
        ("the app closes itself every time I open it", {"technical_issue"}),
        # the bundled workflows each have an intent that starts them (change_address, cancel_order: #16)
        ("帮我改一下订单100235的收货地址", {"change_address"}),
        ("my address is wrong on the order", {"change_address"}),
        ("cancel my order", {"cancel_order"}),
        ("下错单了，这单不要了", {"cancel_order"}),
        ("订单100230退款50元", {"refund_request"}),
        ("订单100230开发票", {"invoice"}),
        ("发货以后还能改地址吗", {"faq"}),
        ("取消订单了钱怎么还没退", {"refund_status"}),
        ("明天北京会下雨吗", {None}),
        ("who won the world cup in 2018", {None}),
        ("给我唱首歌吧", {None}),
    ],
)
def test_e5_on_the_bundled_sample(e5_encoder, text, intent, tmp_path_factory):
    clf = _sample_classifier(e5_encoder, tmp_path_factory)
    c = clf.classify(text)
    assert c.intent in intent, c.explanation


_SAMPLE: dict = {}
# An operator's out-of-scope examples: the evidence that teaches the rejector what "far away" looks like
# (the bundled sample has none; without them only held-out intents, i.e. near OOS, stand in).
OOS_EXAMPLES = ["今天天气怎么样", "给我讲个笑话", "你叫什么名字", "股票会涨吗", "推荐一部电影", "帮我订一张机票",
                "what's the weather like", "tell me a joke", "what is your name", "recommend a movie",
                "book me a flight to tokyo", "how tall is mount everest"]


def _sample_classifier(encoder, tmp_path_factory):
    if "clf" not in _SAMPLE:
        config = load_intents().model_copy(update={"oos_examples": OOS_EXAMPLES})
        _SAMPLE["clf"] = IntentClassifier.from_config(config, encoder, cache_dir=tmp_path_factory.mktemp("heads"))
    return _SAMPLE["clf"]


def test_fast_single_message_head_equals_scikit_learn(fitted):
    _, clf = fitted
    head = clf._state[2].head
    texts = ["where is my order", "我要退款", "what time do you open", "zzz qqq", "reset my password please"]
    from router.classify.evaluate import EmbeddingCache

    vectors = EmbeddingCache(None).encode(clf.encoder, texts)
    fast = head.predict_proba(vectors, texts)  # <= 8 rows: the hand-rolled path
    slow = head.model.predict_proba(head._features(vectors, texts))
    assert np.allclose(fast, slow, atol=1e-8)


def test_sighup_reloads_the_file_and_a_broken_file_keeps_the_running_config(minilm_encoder, tmp_path):
    import os
    import signal

    path = tmp_path / "intents.yaml"
    path.write_text("version: 1\nthreshold: 0.5\nintents:\n  - name: refund\n    tier: L2\n"
                    "    rules: [{type: keywords, any: [refund]}]\n", encoding="utf-8")
    clf = IntentClassifier.from_config(load_intents(path), minilm_encoder)
    assert clf.reload_on_sighup(path)
    try:
        path.write_text(path.read_text(encoding="utf-8").replace("tier: L2", "tier: L3"), encoding="utf-8")
        os.kill(os.getpid(), signal.SIGHUP)
        clf.last_reload.join(timeout=60)
        assert clf.classify("refund please").tier == "L3"
        path.write_text("version: 1\nintents:\n  - name: refund\n    tier: L9\n", encoding="utf-8")
        os.kill(os.getpid(), signal.SIGHUP)
        clf.last_reload.join(timeout=60)
        assert clf.classify("refund please").tier == "L3"  # the broken file was not applied
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def test_a_reload_built_by_the_gateway_is_adopted_whole_and_a_broken_file_builds_nothing(minilm_encoder, tmp_path):
    # the gateway rebuilds as it started (cached vectors and fit): reload_file takes that classifier's state
    path = tmp_path / "intents.yaml"
    path.write_text("version: 1\nthreshold: 0.5\nintents:\n  - name: refund\n    tier: L2\n"
                    "    rules: [{type: keywords, any: [refund]}]\n", encoding="utf-8")
    clf = IntentClassifier.from_config(load_intents(path), minilm_encoder)
    built = []

    def build(config):
        built.append(config)
        return IntentClassifier.from_config(config, minilm_encoder)

    path.write_text(path.read_text(encoding="utf-8").replace("tier: L2", "tier: L3"), encoding="utf-8")
    assert clf.reload_file(path, build=build)
    assert [c.intents[0].tier for c in built] == ["L3"] and clf.classify("refund please").tier == "L3"
    path.write_text("version: 1\nintents:\n  - name: refund\n    tier: L9\n", encoding="utf-8")
    assert not clf.reload_file(path, build=build)
    assert len(built) == 1 and clf.classify("refund please").tier == "L3"
