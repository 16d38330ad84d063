"""Service config: defaults < file < env < flags, and every mistake named with its fix."""

from __future__ import annotations

import msgspec
import pytest

from gpuslice import config
from gpuslice.errors import ConfigError


class Leader(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    namespace: str = "gpuslice-system"
    lease_seconds: int = msgspec.field(name="leaseSeconds", default=15)


class Schema(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    port: int = 8080
    policy_name: str = msgspec.field(name="policyName", default="binpack")
    debug: bool = False
    leader: Leader = msgspec.field(default_factory=Leader)


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return str(p)


def test_defaults_then_file_then_env_then_flags(tmp_path):
    path = write(tmp_path, "port: 9000\npolicyName: spread\nleader:\n  leaseSeconds: 20\n")
    env = {"GS_PORT": "9100", "GS_LEADER__LEASE_SECONDS": "30", "OTHER": "x"}
    got = config.load(Schema, path, env_prefix="GS", environ=env, flags={"port": 9200,
                                                                         "debug": None})
    assert got == Schema(port=9200, policy_name="spread", debug=False,
                         leader=Leader(lease_seconds=30))


def test_no_file_gives_the_defaults():
    assert config.load(Schema, None, env_prefix="GS", environ={}) == Schema()


def test_env_names_follow_camel_case_keys():
    got = config.load(Schema, None, env_prefix="GS", environ={"GS_POLICY_NAME": "spread",
                                                              "GS_DEBUG": "true"})
    assert got.policy_name == "spread" and got.debug is True


@pytest.mark.parametrize(("text", "env", "message"), [
    pytest.param("port: eighty\n", {}, r"c.yaml: port: Expected `int`, got `str`",
                 id="bad value in the file"),
    pytest.param("prot: 1\n", {}, r"c.yaml: has unknown field `prot`; known keys: debug, leader",
                 id="typo in a key"),
    pytest.param("leader:\n  nme: x\n", {}, r"leader: has unknown field `nme`; known keys: "
                 r"leaseSeconds, namespace", id="typo in a nested key"),
    pytest.param("", {"GS_PORT": "x"}, r"^GS_PORT: port: Expected `int`", id="bad env value"),
    pytest.param("", {"GS_PROT": "1"}, r"^GS_PROT: no such setting; known: .*GS_PORT",
                 id="unknown env variable"),
    pytest.param("- a\n- b\n", {}, r"expected a mapping", id="a list, not a mapping"),
    pytest.param("a: [\n", {}, r"not valid YAML", id="broken YAML"),
    pytest.param("a: &x 1\nb: *x\n", {}, r"aliases \(\*name\) are not allowed",
                 id="aliases refused"),
])
def test_mistakes_name_the_source_and_key(tmp_path, text, env, message):
    with pytest.raises(ConfigError, match=message):
        config.load(Schema, write(tmp_path, text), env_prefix="GS", environ=env)


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        config.load(Schema, str(tmp_path / "nope.yaml"), env_prefix="GS", environ={})
