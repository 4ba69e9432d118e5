"""`switchboard router eval|fit|classify` run for real (typer's runner, real encoder, real files)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from router.cli import app
from router.classify.intents import load_intents

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "intents_small"
REQUIRED = {"in_scope_accuracy", "oos_recall", "oos_precision", "macro_f1", "n", "latency_ms_p50", "latency_ms_p95",
            "encoder"}


@pytest.fixture
def run(tmp_path, minilm_path, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SWITCHBOARD_EMBEDDING_MODEL", str(minilm_path))
    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(app, list(args), catch_exceptions=False)
        return result

    return invoke


def _json(result) -> dict:
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


def test_eval_json_has_the_required_keys_and_sane_values(run, tmp_path):
    result = run("router", "eval", "--train", str(FIXTURE / "train.jsonl"), "--test", str(FIXTURE / "test.jsonl"),
                 "--json")
    assert result.exit_code == 0, result.stdout
    out = _json(result)
    assert REQUIRED <= set(out)
    assert out["n"] == 32 and out["n_oos"] == 8
    assert out["in_scope_accuracy"] >= 0.8 and out["oos_recall"] >= 0.5  # small model, tiny set: loose floors
    assert 0 < out["latency_ms_p50"] <= out["latency_ms_p95"]
    assert out["encoder"] and 0.0 < out["threshold"] < 1.0
    # the embedding and fit caches were filled: a second run reuses TRAIN's vectors and fit, same threshold
    assert list((tmp_path / "home" / "cache" / "embeddings").rglob("*.npy"))
    assert len(list((tmp_path / "home" / "cache" / "fits").glob("*.json"))) == 1
    again = _json(run("router", "eval", "--train", str(FIXTURE / "train.jsonl"), "--test",
                      str(FIXTURE / "test.jsonl"), "--json"))
    assert again["threshold"] == out["threshold"] and again["in_scope_accuracy"] == out["in_scope_accuracy"]


def test_threshold_never_depends_on_test(run, tmp_path):
    """Fitting reads TRAIN only: a completely different TEST file leaves threshold and CV figures unchanged."""
    other = tmp_path / "other_test.jsonl"
    other.write_text("\n".join(json.dumps({"text": t, "intent": i}) for t, i in [
        ("where is my parcel", "track_order"), ("what is the meaning of life", "oos"),
        ("refund please", "refund"), ("oos oos oos", "oos")]) + "\n", encoding="utf-8")
    a = _json(run("router", "eval", "--train", str(FIXTURE / "train.jsonl"), "--test", str(FIXTURE / "test.jsonl"),
                  "--json", "--no-cache"))
    b = _json(run("router", "eval", "--train", str(FIXTURE / "train.jsonl"), "--test", str(other), "--json",
                  "--no-cache"))
    assert a["n"] != b["n"]
    assert a["threshold"] == b["threshold"] and a["cv"] == b["cv"]


def test_eval_report_writes_confusion_pairs_and_a_png(run, tmp_path):
    report = tmp_path / "report"
    result = run("router", "eval", "--train", str(FIXTURE / "train.jsonl"), "--test", str(FIXTURE / "test.jsonl"),
                 "--report", str(report))
    assert result.exit_code == 0, result.stdout
    assert "in-scope accuracy" in result.stdout
    pairs = json.loads((report / "confusion_pairs.json").read_text(encoding="utf-8"))
    assert isinstance(pairs, list) and all({"gold", "predicted", "count"} <= set(p) for p in pairs)
    summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    wrong = round(summary["n"] * (1 - summary["accuracy"]))
    assert sum(p["count"] for p in pairs) == wrong
    png = (report / "score_distributions.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_fit_writes_an_intents_file_that_loads_and_classifies(run, tmp_path, minilm_encoder):
    out = tmp_path / "fitted" / "intents.yaml"
    result = run("router", "fit", "--train", str(FIXTURE / "train.jsonl"), "--out", str(out), "--json")
    assert result.exit_code == 0, result.stdout
    summary = _json(result)
    assert summary["intents"] == 6 and summary["oos_examples"] == 10
    config = load_intents(out)
    assert config.threshold == summary["threshold"]
    assert config.scoring["method"] == "head+knn" and config.scoring["encoder"] == minilm_encoder.name
    assert len(config.scoring["rejector"]["coef"]) == len(config.scoring["rejector"]["features"])
    from router.classify import IntentClassifier
    from router.classify.fit import needs_fit

    assert needs_fit(config, minilm_encoder) is None  # used as written, no refit at load
    clf = IntentClassifier.from_config(config, minilm_encoder)
    assert clf.config.threshold == config.threshold
    assert clf.classify("I forgot my password").intent == "change_password"


def test_fit_on_top_of_an_intents_file_keeps_its_rules_and_tiers(run, tmp_path):
    out = tmp_path / "merged.yaml"
    result = run("router", "fit", "--train", str(FIXTURE / "train.jsonl"), "--intents",
                 str(Path(__file__).resolve().parents[3] / "router" / "samples" / "intents.yaml"), "--out", str(out),
                 "--tier", "L2", "--json")
    assert result.exit_code == 0, result.stdout
    merged = load_intents(out)
    sample = load_intents()
    assert merged.names[: len(sample.names)] == sample.names
    assert merged.intent("human_agent").rules == sample.intent("human_agent").rules
    assert merged.intent("human_agent").tier == "L3" and merged.intent("refund").tier == "L2"


def test_fit_of_an_intents_files_own_examples_is_written_into_it(run, tmp_path, minilm_encoder):
    """`router fit --intents FILE`: FILE's own examples fitted (here for the small encoder), the threshold and the
    scoring block replaced in FILE, every other line as it was; the report says what the file had before."""
    sample = Path(__file__).resolve().parents[3] / "router" / "samples" / "intents.yaml"
    path = tmp_path / "intents.yaml"
    shutil.copy(sample, path)
    result = run("router", "fit", "--intents", str(path), "--json")
    assert result.exit_code == 0, result.stdout
    summary = _json(result)
    before = load_intents(sample)
    assert summary["out"] == str(path) and summary["before"]["threshold"] == before.threshold
    assert summary["before"]["cv"] == before.scoring["cv"] and summary["cv"]["rows"] == before.scoring["cv"]["rows"]
    fitted = load_intents(path)
    assert fitted.threshold == summary["threshold"] and fitted.scoring["encoder"] == minilm_encoder.name
    old, new = sample.read_text(encoding="utf-8").splitlines(), path.read_text(encoding="utf-8").splitlines()
    start = old.index("scoring:")
    assert new[:start] == [ln if not ln.startswith("threshold:") else f"threshold: {fitted.threshold}"
                           for ln in old[:start]]
    assert fitted.model_dump(exclude={"threshold", "scoring"}) == before.model_dump(exclude={"threshold", "scoring"})
    nothing = run("router", "fit", "--json")
    assert nothing.exit_code == 2 and "--intents" in _json(nothing)["error"]


def test_classify_prints_the_decision_with_entities(run):
    result = run("router", "classify", "转人工，订单号 2024110512345", "--json")
    assert result.exit_code == 0, result.stdout
    out = _json(result)
    assert out["intent"] == "human_agent" and out["decided_by"] == "rules"
    assert out["entities"]["order_numbers"] == ["2024110512345"]


def test_bad_input_fails_cleanly(run, tmp_path):
    missing = run("router", "eval", "--train", str(tmp_path / "nope.jsonl"), "--test", str(FIXTURE / "test.jsonl"),
                  "--json")
    assert missing.exit_code == 2 and "nope.jsonl" in _json(missing)["error"]
    broken = tmp_path / "broken.jsonl"
    shutil.copy(FIXTURE / "train.jsonl", broken)
    with broken.open("a", encoding="utf-8") as fh:
        fh.write('{"text": "no intent here"}\n')
    result = run("router", "fit", "--train", str(broken), "--out", str(tmp_path / "x.yaml"), "--json")
    assert result.exit_code == 2 and "broken.jsonl:71" in _json(result)["error"]
    assert not (tmp_path / "x.yaml").exists()
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("version: 1\nintents:\n  - name: a\n    tier: L9\n", encoding="utf-8")
    result = run("router", "classify", "hello", "--intents", str(bad_yaml), "--json")
    assert result.exit_code == 2 and "bad.yaml:4" in _json(result)["error"]


def test_help_lists_the_commands(run):
    result = run("router", "--help")
    assert result.exit_code == 0
    assert all(cmd in result.stdout for cmd in ("eval", "fit", "classify"))
