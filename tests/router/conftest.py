"""The router's tests sit in folders that mirror router's packages (channels/, turn/, outbox/, ...); the kits
they share stay here (channels_support, keys_testkit, ops_testkit, routing_kit), and this folder goes on
sys.path so a test in any of those folders imports a kit by its name."""

from __future__ import annotations

import sys
from pathlib import Path

KITS = str(Path(__file__).resolve().parent)
if KITS not in sys.path:
    sys.path.insert(0, KITS)
