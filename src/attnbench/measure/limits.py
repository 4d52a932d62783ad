"""Bounds shared by the settings and the CLI's own options (no imports: the CLI loads it)."""

from __future__ import annotations

MAX_SEED = (1 << 32) - 1
"""Seeds go to torch and numpy generators; 0..2^32-1 is what every one of them accepts."""
