"""The device plugin and PodResources gRPC code speaks WIRE.md's fields (regenerated and
compared: tests/unit/test_generated_protos_are_current.py)."""

from __future__ import annotations

import pytest

from gpuslice.node.proto import deviceplugin_pb2 as dp
from gpuslice.node.proto import podresources_pb2 as pr


@pytest.mark.parametrize(("message", "fields"), [
    (dp.RegisterRequest, {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}),
    (dp.Device, {"ID": 1, "health": 2, "topology": 3}),
    (dp.ContainerPreferredAllocationRequest,
     {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}),
    (dp.ContainerAllocateResponse,
     {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}),
    (dp.Mount, {"container_path": 1, "host_path": 2, "read_only": 3}),
    (pr.ContainerDevices, {"resource_name": 1, "device_ids": 2, "topology": 3}),
    (pr.PodResources, {"name": 1, "namespace": 2, "containers": 3}),
], ids=lambda v: getattr(v, "__name__", ""))
def test_field_names_and_numbers_are_the_kubelets(message, fields):
    got = {f.name: f.number for f in message.DESCRIPTOR.fields}
    assert got == fields


def test_services_have_the_kubelets_full_names():
    assert dp.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == "v1beta1.DevicePlugin"
    assert dp.DESCRIPTOR.services_by_name["Registration"].full_name == "v1beta1.Registration"
    assert pr.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == \
        "v1.PodResourcesLister"
