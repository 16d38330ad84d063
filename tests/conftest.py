"""Shared pytest set-up: the `gpu` marker is deselected by default (see pyproject addopts)."""

pytest_plugins = ["kubeapi.fixtures"]  # kube_api: the test API server (tests/kubeapi/)
