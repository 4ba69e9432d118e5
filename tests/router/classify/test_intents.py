"""The intents file: the bundled sample validates; every error names the file, the line and the field."""

from __future__ import annotations

import textwrap

import pytest

from router.classify.intents import BUNDLED_INTENTS, IntentConfigError, load_intents, parse_intents, save_intents

GOOD = textwrap.dedent("""\
    version: 1
    threshold: 0.5
    unknown_tier: L2
    intents:
      - name: refund
        tier: L2
        rules:
          - type: regex
            pattern: "退款|refund"
            priority: 10
        examples: [I want my money back, 我要退款]
      - name: track
        tier: L1
        threshold: 0.7
        rules:
          - {type: keywords, any: [where is my parcel, 快递到哪], priority: 5}
        examples: [where is my order]
    """)


def _error(text: str, file: str = "intents.yaml") -> IntentConfigError:
    with pytest.raises(IntentConfigError) as info:
        parse_intents(text, file=file)
    return info.value


def test_bundled_sample_validates():
    config = load_intents(BUNDLED_INTENTS)
    assert config.intents, "the sample defines intents"
    assert {i.tier for i in config.intents} <= {"L1", "L2", "L3"}
    assert config.unknown_tier in ("L1", "L2", "L3")
    assert any(i.rules for i in config.intents) and any(i.examples for i in config.intents)
    assert load_intents(None).names == config.names  # None means the bundled sample


def test_good_file_parses_with_defaults_and_lookups():
    config = parse_intents(GOOD)
    assert config.names == ["refund", "track"]
    assert config.tier_of("track") == "L1" and config.tier_of(None) == "L2" and config.tier_of("nope") == "L2"
    assert config.intent("track").threshold == 0.7
    assert config.intents[0].rules[0].priority == 10


def test_bad_tier_names_line_and_field():
    err = _error(GOOD.replace("tier: L1", "tier: L4"))
    assert err.line == 13 and err.field == "intents[1](track).tier"
    assert "intents.yaml:13" in str(err) and "L1" in str(err)


def test_invalid_regex_points_at_the_pattern_line():
    err = _error(GOOD.replace('"退款|refund"', '"退款|refund("'))
    assert err.line == 9
    assert err.field == "intents[0](refund).rules[0].pattern"
    assert "regular expression" in err.message


def test_unknown_field_lists_the_allowed_ones():
    err = _error(GOOD.replace("    threshold: 0.7\n", "    threshold: 0.7\n    colour: red\n"))
    assert err.line == 15 and err.field == "intents[1](track).colour"
    assert "allowed" in err.message and "examples" in err.message


def test_keyword_rule_without_keywords_and_regex_without_pattern():
    err = _error(GOOD.replace("{type: keywords, any: [where is my parcel, 快递到哪], priority: 5}",
                              "{type: keywords, priority: 5}"))
    assert err.line == 16 and err.field == "intents[1](track).rules[0]" and "any" in err.message
    err = _error(GOOD.replace('        pattern: "退款|refund"\n', ""))
    assert err.line == 8 and "pattern" in err.message


def test_duplicate_intent_name_and_duplicate_key():
    err = _error(GOOD.replace("name: track", "name: refund"))
    assert err.line == 12 and err.field == "intents[1](refund).name" and "duplicate" in err.message
    err = _error(GOOD.replace("    unknown_tier: L2\n", "").replace("threshold: 0.5\n", "threshold: 0.5\nthreshold: 0.6\n"))
    assert err.line == 3 and err.field == "threshold" and "duplicate" in err.message


def test_type_errors_and_every_error_is_listed():
    err = _error(GOOD.replace("threshold: 0.5", "threshold: high").replace("priority: 10", "priority: first"))
    fields = {e["field"]: e["line"] for e in err.errors}
    assert fields == {"threshold": 2, "intents[0](refund).rules[0].priority": 10}
    assert str(err).count("intents.yaml:") == 2


def test_broken_yaml_empty_file_and_wrong_top_level():
    err = _error("version: 1\nintents:\n  - name: a\n    tier: [L1\n")
    assert err.line is not None and err.line >= 4 and "YAML" in err.message
    assert _error("").line == 1
    assert "mapping" in _error("- a\n- b\n").message
    assert _error("version: 1\nintents: []\n").field == "intents" or "intent" in str(_error("version: 1\nintents: []\n"))


def test_reserved_oos_name_and_empty_examples():
    err = _error(GOOD.replace("name: track", "name: oos"))
    assert err.field == "intents[1](oos).name" and "oos_examples" in err.message
    err = _error(GOOD.replace("examples: [where is my order]", 'examples: ["  "]'))
    assert err.line == 17 and err.field == "intents[1](track).examples"


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(IntentConfigError) as info:
        load_intents(tmp_path / "nope.yaml")
    assert "not found" in str(info.value)


def test_round_trip_through_save(tmp_path):
    config = parse_intents(GOOD)
    path = save_intents(config.model_copy(update={"scoring": {"method": "knn"}}), tmp_path / "out" / "i.yaml")
    again = load_intents(path)
    assert again.names == config.names
    assert again.intents[1].rules[0].any == ["where is my parcel", "快递到哪"]
    assert again.scoring == {"method": "knn"}
    assert "我要退款" in path.read_text(encoding="utf-8")  # written as readable UTF-8, not escapes
