"""The node agent's config: file < env < flags, and every mistake named."""

from __future__ import annotations

import pytest

from gpuslice.errors import ConfigError
from gpuslice.node.settings import load


def test_file_env_and_flags_stack_in_that_order(tmp_path):
    f = tmp_path / "agent.yaml"
    f.write_text("nodeName: from-file\nsplitCount: 4\nwatchdog:\n  kill: false\n")
    c = load(str(f), flags={"nodeName": "from-flag"},
             environ={"GPUSLICE_NODE_SPLIT_COUNT": "6", "GPUSLICE_NODE_WATCHDOG__KILL": "true"})
    assert (c.node_name, c.split_count, c.watchdog.kill) == ("from-flag", 6, True)


@pytest.mark.parametrize(("text", "needle"), [
    ("splitCount: 0", "splitCount=0"),
    ("memoryScaling: -1", "memoryScaling=-1"),
    ("resources: [nvidia.com/gpumem]", "resources="),
    ("metricsAddress: nowhere", "metricsAddress"),
    ("splitcount: 3", "splitcount"),
    ("computeMode: soft", "computeMode"),
], ids=["zero split", "negative scaling", "extender resource", "bad address", "typo", "mode"])
def test_bad_values_are_config_errors_naming_the_key(tmp_path, text, needle):
    f = tmp_path / "agent.yaml"
    f.write_text(f"nodeName: n\n{text}\n")
    with pytest.raises(ConfigError, match=needle):
        load(str(f), environ={})


def test_a_missing_node_name_says_how_to_pass_it():
    with pytest.raises(ConfigError, match="--node-name"):
        load(None, environ={})


@pytest.mark.parametrize(("flags", "needle"), [
    ({"gpuPath": "dra"}, "gpuPath=dra without dra.enabled"),
    ({"resources": []}, "none only with dra.enabled"),
    ({"resources": [], "dra": {"enabled": True}}, "gpuPath=device-plugin with resources=\\[\\]"),
    ({"gpuPath": "mig"}, "gpuPath"),
])
def test_a_gpu_path_the_agent_cannot_serve_is_refused_at_start(flags, needle):
    with pytest.raises(ConfigError, match=needle):
        load(None, flags={"nodeName": "n", **flags}, environ={})


def test_a_dra_only_node_needs_no_device_resources():
    c = load(None, flags={"nodeName": "n", "resources": [], "gpuPath": "dra",
                          "dra": {"enabled": True}}, environ={})
    assert (c.gpu_path, c.resources) == ("dra", [])
