"""RFC 6901 JSON Pointers for the webhook's JSON Patch operations (admit.py, dra.py)."""

from __future__ import annotations

__all__ = ["pointer"]


def pointer(*parts: str | int) -> str:
    """An RFC 6901 JSON Pointer: `~` -> `~0`, `/` -> `~1` in each part."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)
