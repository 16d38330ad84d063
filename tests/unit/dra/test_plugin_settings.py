"""The node config's `dra` section: the contract's defaults, env overrides, clear errors."""

from __future__ import annotations

import pytest

from gpuslice.errors import ConfigError
from gpuslice.node.settings import DraConfig, load


def test_the_defaults_are_the_contracts_and_dra_is_off():
    assert load(None, {"nodeName": "n"}, environ={}).dra == DraConfig(
        enabled=False, driver_name="gpu.gpuslice.io",
        plugin_dir="/var/lib/kubelet/plugins/gpu.gpuslice.io",
        registry_dir="/var/lib/kubelet/plugins_registry", cdi_dir="/var/run/cdi",
        memory_step_mib=256)


def test_a_file_and_nested_env_variables_set_it(tmp_path):
    f = tmp_path / "agent.yaml"
    f.write_text("nodeName: n\ndra: {memoryStepMiB: 512, cdiDir: /etc/cdi}\n")
    cfg = load(str(f), environ={"GPUSLICE_NODE_DRA__ENABLED": "true"})
    assert (cfg.dra.enabled, cfg.dra.memory_step_mib, cfg.dra.cdi_dir) == (True, 512, "/etc/cdi")


@pytest.mark.parametrize(("dra", "words"), [
    ({"memoryStepMiB": 0}, "dra.memoryStepMiB=0: use 1..1048576 MiB"),
    ({"driverName": "GPU_Slice"}, "dra.driverName='GPU_Slice': use a DNS subdomain"),
    ({"pluginsDir": "/x"}, "pluginsDir"),
])
def test_a_wrong_key_or_value_names_it(dra, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.").replace("(", r"\(")):
        load(None, {"nodeName": "n", "dra": dra}, environ={})
