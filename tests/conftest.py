"""Shared pytest set-up: the `gpu` marker is deselected by default (see pyproject addopts)."""
