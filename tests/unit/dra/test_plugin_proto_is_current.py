"""The DRA gRPC code speaks WIRE.md's fields (regenerated and compared:
tests/unit/test_generated_protos_are_current.py)."""

from __future__ import annotations

import pytest

from gpuslice.dra.proto import dra_pb2, pluginregistration_pb2


@pytest.mark.parametrize(("message", "fields"), [
    (dra_pb2.Claim, {"namespace": 1, "uid": 2, "name": 3}),
    (dra_pb2.NodePrepareResourcesRequest, {"claims": 1}),
    (dra_pb2.NodePrepareResourcesResponse, {"claims": 1}),
    (dra_pb2.NodePrepareResourceResponse, {"devices": 1, "error": 2}),
    (dra_pb2.Device, {"request_names": 1, "pool_name": 2, "device_name": 3,
                      "cdi_device_ids": 4, "share_id": 5}),
    (dra_pb2.NodeUnprepareResourcesResponse, {"claims": 1}),
    (dra_pb2.NodeUnprepareResourceResponse, {"error": 1}),
    (pluginregistration_pb2.PluginInfo,
     {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}),
    (pluginregistration_pb2.RegistrationStatus, {"plugin_registered": 1, "error": 2}),
], ids=lambda v: getattr(v, "__name__", ""))
def test_field_names_and_numbers_are_the_kubelets(message, fields):
    assert {f.name: f.number for f in message.DESCRIPTOR.fields} == fields


def test_share_id_is_optional_so_an_unset_one_is_not_sent():
    assert dra_pb2.Device.DESCRIPTOR.fields_by_name["share_id"].has_presence
    assert not dra_pb2.Device(device_name="gpu-0").HasField("share_id")


def test_services_have_the_kubelets_full_names():
    assert dra_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == \
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"].full_name == \
        "pluginregistration.Registration"
