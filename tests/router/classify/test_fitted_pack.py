"""The bundled intents carry their fit (threshold and rejector): a change of the examples never moves the threshold
unseen; fitting again is `switchboard router fit --intents FILE`, whose written file keeps every other line."""

from __future__ import annotations

import logging

import pytest
import yaml

from router.classify import IntentClassifier
from router.classify.fit import examples_digest, needs_fit, stale_fit
from router.classify.intents import BUNDLED_INTENTS, load_intents, parse_intents, write_fit

# the fit of the bundled examples on multilingual-e5-small (cross-validated in-scope accuracy 0.7735, OOS recall 1.0)
THRESHOLD = 0.3303


def test_the_bundled_pack_carries_its_fit_and_is_used_as_written(e5_encoder):
    config = load_intents(BUNDLED_INTENTS)
    assert config.threshold == THRESHOLD
    scoring = config.scoring or {}
    assert scoring["method"] == "head+knn" and scoring["encoder"] == "multilingual-e5-small"
    assert scoring["cv"]["in_scope_accuracy"] == 0.7735 and scoring["cv"]["oos_recall"] == {"oos": 1.0}
    assert len(scoring["rejector"]["coef"]) == len(scoring["rejector"]["features"])
    assert needs_fit(config, e5_encoder) is None


def test_a_bf16_encoder_uses_the_fit_of_its_fp32_queries(e5_path):
    """BF16 computes passages in bf16, queries (the examples are encoded as queries) in fp32: the same fit."""
    from rag.encoder_backends import BF16Encoder, QuantizedEncoder

    config = load_intents(BUNDLED_INTENTS)
    assert needs_fit(config, BF16Encoder(e5_path, threads=1)) is None
    assert "fitted with encoder" in (needs_fit(config, QuantizedEncoder(e5_path, threads=1)) or "")


def test_a_new_example_does_not_move_the_threshold(e5_encoder, tmp_path, caplog):
    text = BUNDLED_INTENTS.read_text(encoding="utf-8")
    anchor = '      - "where is my refund"\n'
    changed = text.replace(anchor, anchor + '      - "my refund still has not reached my bank"\n', 1)
    assert changed != text
    path = tmp_path / "intents.yaml"
    path.write_text(changed, encoding="utf-8")
    config = load_intents(path)
    assert stale_fit(config) and not stale_fit(load_intents(BUNDLED_INTENTS))
    with caplog.at_level(logging.WARNING, logger="router.classify.base"):
        clf = IntentClassifier.from_config(config, e5_encoder, cache_dir=tmp_path / "heads")
    assert clf.config.threshold == THRESHOLD
    assert clf.config.scoring["rejector"] == load_intents(BUNDLED_INTENTS).scoring["rejector"]
    assert "examples changed since the threshold was fitted" in caplog.text
    c = clf.classify("my refund hasn't reached my card yet")
    assert c.intent == "refund_status" and c.explanation["threshold"] == THRESHOLD, c.explanation


def test_writing_a_fit_changes_the_threshold_and_scoring_only():
    text = BUNDLED_INTENTS.read_text(encoding="utf-8")
    config = load_intents(BUNDLED_INTENTS)
    # the bundled file is what the writer writes for its own fit, byte for byte
    assert write_fit(text, config.threshold, config.scoring) == text
    scoring = {**config.scoring, "rejector": {**config.scoring["rejector"], "intercept": 0.5}}
    out = write_fit(text, 0.41, scoring)
    again = parse_intents(out)
    assert again.threshold == 0.41 and again.scoring["rejector"]["intercept"] == 0.5
    assert again.model_dump(exclude={"threshold", "scoring"}) == config.model_dump(exclude={"threshold", "scoring"})
    changed = [(a, b) for a, b in zip(text.splitlines(), out.splitlines(), strict=True) if a != b]
    assert changed == [("threshold: 0.3303", "threshold: 0.41"), ("    intercept: 1.343119", "    intercept: 0.5")]


def test_a_file_without_a_fit_gets_one_and_keeps_its_comments():
    text = ("# my shop\nversion: 1\nthreshold: null   # fitted below\nintents:\n  - name: refund\n    tier: L2\n"
            "    examples: [I want my money back, 我要退款]   # money\n  - name: track\n    tier: L1\n"
            "    examples: [where is my parcel]\n# the end\n")
    scoring = {"method": "head+knn", "C": 10.0, "rejector": {"coef": [1.0, -2.0], "intercept": 0.1}}
    out = write_fit(text, 0.3, scoring)
    assert out.startswith(text.replace("threshold: null", "threshold: 0.3"))
    assert yaml.safe_load(out)["scoring"] == scoring and parse_intents(out).threshold == 0.3
    assert write_fit(out, 0.25, scoring) == out.replace("threshold: 0.3", "threshold: 0.25")   # replaced in place
    assert examples_digest(parse_intents(out)) == examples_digest(parse_intents(text))
    bare = text.replace("threshold: null   # fitted below\n", "")
    assert write_fit(bare, 0.3, scoring).startswith("# my shop\nversion: 1\nthreshold: 0.3\nintents:\n")


@pytest.mark.parametrize("bad", ["- just\n- a list\n"])
def test_a_file_that_is_no_mapping_is_refused(bad):
    from router.classify.intents import IntentConfigError

    with pytest.raises(IntentConfigError):
        write_fit(bad, 0.3, None)
