"""`switchboard rag eval --mode answer` on a BEIR set generated here: a seeded half of the queries lose
their documents; the rates are consistent with each other and with the threshold."""

from __future__ import annotations

import json

import pytest
from test_rag_eval_cli import cli  # noqa: F401 - the CLI fixture (real database, small encoder)

from rag.eval import BeirData, answer_rates, split_unanswerable

TOPICS = [
    ("parking", "Parking at the store", "Customers can park for free for two hours in the garage under the store."),
    ("gift-wrap", "Gift wrapping", "Gift wrapping costs three euros per item and is chosen at checkout."),
    ("pets", "Pets in the store", "Dogs on a leash are welcome in the store; other pets are not allowed."),
    ("student", "Student discount", "Students get ten percent off with a valid student card at the till."),
    ("warranty", "Warranty of bicycles", "Bicycles carry a five year warranty on the frame and one year on parts."),
    ("bulk", "Bulk orders", "Orders of more than fifty items are handled by the business sales team."),
    ("repair", "Phone screen repair", "Cracked phone screens are repaired within three working days in store."),
    ("lockers", "Pickup lockers", "Parcels wait in the pickup locker for seven days before they are returned."),
    ("recycling", "Battery recycling", "Old batteries can be dropped in the recycling box next to the entrance."),
    ("cafe", "The store cafe", "The cafe on the first floor serves coffee and cake from nine to six."),
    ("wifi", "Free wifi", "The store offers free wifi; the network name is printed on every receipt."),
    ("alterations", "Clothing alterations", "Trousers are shortened for free when bought at full price."),
]
QUERIES = {
    "parking": ["is parking free at your shop", "how long can I leave my car in the garage"],
    "gift-wrap": ["can you wrap a present for me", "how much is gift wrapping"],
    "pets": ["can I bring my dog inside", "are cats allowed in the store"],
    "student": ["do students get a discount", "student card reduction"],
    "warranty": ["how long is the bike frame guaranteed", "warranty on bicycle parts"],
    "bulk": ["I want to order 200 items", "who handles large business orders"],
    "repair": ["my phone screen is cracked can you fix it", "how long does a screen repair take"],
    "lockers": ["how long does my parcel stay in the locker", "pickup locker time limit"],
    "recycling": ["where do I throw away old batteries", "battery recycling box"],
    "cafe": ["when is the cafe open", "do you sell coffee in the store"],
    "wifi": ["is there free internet in the store", "what is the wifi network name"],
    "alterations": ["can you shorten my trousers", "do you do clothing alterations"],
}


@pytest.fixture
def beir(tmp_path):
    folder = tmp_path / "generated"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": t, "text": x}) + "\n"
                                                 for d, t, x in TOPICS), encoding="utf-8")
    queries, qrels = [], ["query-id\tcorpus-id\tscore"]
    for doc, texts in QUERIES.items():
        for i, text in enumerate(texts):
            qid = f"{doc}-q{i}"
            queries.append(json.dumps({"_id": qid, "text": text}))
            qrels.append(f"{qid}\t{doc}\t1")
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n", encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return folder


def test_the_split_removes_exactly_the_documents_of_the_unanswerable_half():
    qrels = {f"q{i}": {f"d{i // 2}": 1} for i in range(20)} | {"q-shared": {"d0": 1, "d9": 1}}
    data = BeirData(corpus=[], queries={q: q for q in qrels}, qrels=qrels)
    gone, removed = split_unanswerable(data, seed=3)
    assert abs(len(gone) - len(qrels) / 2) <= 1
    assert removed >= {d for q in gone for d in qrels[q]}
    for q, rel in qrels.items():
        assert (q in gone) == (not set(rel) - removed)        # unanswerable = no relevant document left
    assert split_unanswerable(data, seed=3) == (gone, removed)  # seeded
    assert split_unanswerable(data, seed=4) != (gone, removed)


def test_rates_follow_the_threshold():
    rows = [{"unanswerable": False, "confidence": 0.9, "cited": "a", "relevant_cited": True},
            {"unanswerable": False, "confidence": 0.4, "cited": "b", "relevant_cited": False},
            {"unanswerable": True, "confidence": 0.6, "cited": "c", "relevant_cited": False},
            {"unanswerable": True, "confidence": 0.2, "cited": "d", "relevant_cited": False}]
    at = answer_rates(rows, 0.5)
    assert at["answered_correct_rate"] == 0.5 and at["wrong_answer_rate"] == 0.25
    assert at["unanswerable_abstain_rate"] == 0.5
    assert answer_rates(rows, 0.0)["wrong_answer_rate"] == 0.75 and answer_rates(rows, 1.0)["answered_rate"] == 0


def test_answer_mode_end_to_end(cli, beir):  # noqa: F811
    result, out = cli("rag", "eval", "--beir", str(beir), "--mode", "answer", "--seed", "7", "--json")
    assert result.exit_code == 0, result.stdout
    assert out["mode"] == "answer" and out["n_queries"] == 24
    assert out["n_unanswerable"] + out["n_answerable"] == 24 and 10 <= out["n_unanswerable"] <= 14
    assert out["n_docs_indexed"] + out["n_docs_removed"] == len(TOPICS)
    for key in ("answered_correct_rate", "wrong_answer_rate", "unanswerable_abstain_rate"):
        assert 0.0 <= out[key] <= 1.0
    sweep = out["sweep"]
    answered = [r["answered_rate"] for r in sweep]
    assert answered == sorted(answered, reverse=True)          # a higher threshold never answers more
    # at threshold 0 every query is answered: each unanswerable one is a wrong answer
    _, everything = cli("rag", "eval", "--beir", str(beir), "--mode", "answer", "--seed", "7", "--threshold", "0",
                        "--json")
    assert everything["unanswerable_abstain_rate"] == 0.0
    assert everything["wrong_answer_rate"] >= everything["n_unanswerable"] / 24
    # the small set is easy: with every answerable query answered, most cite their document
    assert everything["answered_correct_rate"] >= 0.7
    text, _ = cli("rag", "eval", "--beir", str(beir), "--mode", "answer", "--seed", "7")
    assert "answered correctly" in text.stdout and "| threshold |" in text.stdout


def test_answer_rows_carry_the_signals_and_calibrate_reports_the_heldout(cli, beir, tmp_path):  # noqa: F811
    rows = tmp_path / "rows.jsonl"
    result, out = cli("rag", "eval", "--beir", str(beir), "--mode", "answer", "--seed", "7", "--rows", str(rows),
                      "--json")
    assert result.exit_code == 0, result.stdout
    model = out["confidence_model"]
    assert {"answer_threshold", "confidence_center", "confidence_slope", "question_weight", "coverage_weight",
            "margin_weight"} <= set(model) and model["answer_threshold"] == out["threshold"]
    held = out["heldout"]                     # the calibration's held-out half of the queries, at the threshold
    assert set(held) >= {"answered_correct_rate", "wrong_answer_rate", "unanswerable_abstain_rate"}
    lines = [json.loads(line) for line in rows.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 24 and all(r["dataset"] == "generated" for r in lines)
    for r in lines:
        sig = r["signals"]
        assert {"cosine", "question", "coverage", "margin", "lang"} <= set(sig)
        assert sig["question"] is not None and -1.0 <= sig["question"] <= 1.0   # every passage has a title
        assert r["top_relevant"] == (r["relevant_cited"] and not r["unanswerable"])
    result, cal = cli("rag", "calibrate", "--rows", str(rows), "--seed", "7", "--json")
    assert result.exit_code == 0, result.stdout
    d = cal["datasets"]["generated"]
    assert d["n_dev"] + d["n_heldout"] == 24 and d["n_dev"] == 12
    assert 0.0 < cal["model"]["answer_threshold"] < 1.0
    # the threshold is the lowest meeting the wrong-answer cap on the dev half
    assert d["dev"]["wrong_answer_rate"] <= 0.05 or cal["model"]["answer_threshold"] == 0.99
    for key in ("answered_correct_rate", "wrong_answer_rate", "unanswerable_abstain_rate"):
        assert 0.0 <= d["heldout"][key] <= 1.0
    assert set(cal["model"]["confidence_center"]) == {r["signals"]["lang"] for r in lines}
    # seeded: the same rows and seed give the same fit
    _, again = cli("rag", "calibrate", "--rows", str(rows), "--seed", "7", "--json")
    assert again["model"] == cal["model"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query_id": "q"}\n', encoding="utf-8")
    result, err = cli("rag", "calibrate", "--rows", str(bad), "--json")
    assert result.exit_code == 2


def test_the_settings_calibrate_prints_are_the_model_rag_eval_then_uses(cli, beir, tmp_path, monkeypatch):  # noqa: F811
    import shlex

    rows = tmp_path / "rows.jsonl"
    cli("rag", "eval", "--beir", str(beir), "--mode", "answer", "--seed", "7", "--rows", str(rows), "--json")
    _, cal = cli("rag", "calibrate", "--rows", str(rows), "--seed", "7", "--json")
    text, _ = cli("rag", "calibrate", "--rows", str(rows), "--seed", "7")
    [line] = [ln for ln in text.stdout.splitlines() if ln.startswith("settings: ")]
    printed = dict(item.split("=", 1) for item in shlex.split(line.removeprefix("settings: ")))
    assert {"SWITCHBOARD_RAG_QUESTION_WEIGHT", "SWITCHBOARD_RAG_MARGIN_WEIGHT",
            "SWITCHBOARD_RAG_UNKNOWN_WEIGHT"} <= set(printed)
    # --write keeps the same fit beside a knowledge base, which loads it back whole
    from rag.config import load_calibration

    kept = tmp_path / "knowledge"
    kept.mkdir()
    result, _ = cli("rag", "calibrate", "--rows", str(rows), "--seed", "7", "--write", str(kept / "calibration.yaml"),
                    "--json")
    assert result.exit_code == 0, result.stdout
    assert load_calibration(kept, "multilingual-e5-small") == cal["model"]
    assert load_calibration(kept, "another-encoder") == {}
    for name, value in printed.items():
        monkeypatch.setenv(name, value)
    result, out = cli("rag", "eval", "--beir", str(beir), "--mode", "answer", "--seed", "7", "--json")
    assert result.exit_code == 0, result.stdout
    assert out["confidence_model"] == cal["model"]        # every fitted parameter is a setting, read back whole
