"""text/ is a leaf: every package may import it, it imports none of them (so every sink masks alike)."""

from __future__ import annotations

import ast
from pathlib import Path

TEXT = Path(__file__).resolve().parents[2] / "text"
FORBIDDEN = ("router", "rag", "handoff", "automation", "examples")


def test_text_imports_no_other_package_of_the_project():
    files = sorted(TEXT.rglob("*.py"))
    assert files
    for path in files:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
