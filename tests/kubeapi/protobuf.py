"""The few protobuf bodies kubectl's typed commands send (`kubectl create namespace|configmap|
secret`), decoded to JSON objects: client-go sends built-in types as
application/vnd.kubernetes.protobuf and does not fall back to JSON.
Owns: the envelope ("k8s\\0" + runtime.Unknown), a schema-less wire-format reader, and the field
numbers of ObjectMeta, Namespace, ConfigMap and Secret (k8s.io/api generated.proto).
Does not: encode (replies are JSON, which client-go reads by Content-Type) or decode any other
kind: those get 415 naming what is supported.
Tests: tests/integration/kubeapi/test_kubectl_against_test_server.py"""

from __future__ import annotations

import base64
from typing import Any

from . import errors

MAGIC = b"k8s\x00"
_META_STRINGS = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}


def _fields(data: Any) -> dict[int, list[Any]]:
    """Field number -> values (ints for varints, bytes for length-delimited)."""
    if not isinstance(data, bytes):
        raise ValueError(f"expected an embedded message, found {type(data).__name__}")
    out: dict[int, list[Any]] = {}
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, i = data[i:i + width], i + width
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _text(raw: Any) -> str:
    if not isinstance(raw, bytes):
        raise ValueError(f"expected a string, found {type(raw).__name__}")
    return raw.decode("utf-8")


def _map(entries: list[bytes], binary: bool = False) -> dict[str, str]:
    result = {}
    for entry in entries:
        f = _fields(entry)
        value = f.get(2, [b""])[0]
        result[_text(f.get(1, [b""])[0])] = (base64.b64encode(value).decode() if binary
                                              else _text(value))
    return result


def _meta(raw: bytes) -> dict[str, Any]:
    f = _fields(raw)
    meta: dict[str, Any] = {name: _text(f[n][0]) for n, name in _META_STRINGS.items() if n in f}
    if 11 in f:
        meta["labels"] = _map(f[11])
    if 12 in f:
        meta["annotations"] = _map(f[12])
    if 14 in f:
        meta["finalizers"] = [_text(v) for v in f[14]]
    return meta


def decode(body: bytes) -> dict[str, Any]:
    """A kubectl protobuf body as the JSON object it stands for."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("protobuf body without the k8s envelope")
    try:
        unknown = _fields(body[len(MAGIC):])
        type_meta = _fields(unknown.get(1, [b""])[0])
        api_version = _text(type_meta.get(1, [b""])[0])
        kind = _text(type_meta.get(2, [b""])[0])
        obj = _fields(unknown.get(2, [b""])[0])
        result: dict[str, Any] = {"apiVersion": api_version, "kind": kind,
                                  "metadata": _meta(obj.get(1, [b""])[0])}
        if kind == "ConfigMap":
            result["data"] = _map(obj.get(2, []))
            if 3 in obj:
                result["binaryData"] = _map(obj[3], binary=True)
        elif kind == "Secret":
            result["data"] = _map(obj.get(2, []), binary=True)
            if 3 in obj:
                result["type"] = _text(obj[3][0])
        elif kind != "Namespace":
            raise errors.unsupported_media_type(
                f"application/vnd.kubernetes.protobuf ({kind}: only Namespace, ConfigMap and "
                "Secret are read as protobuf here; send JSON)")
    except (ValueError, UnicodeDecodeError, IndexError) as e:
        raise errors.bad_request(f"the protobuf body could not be decoded: {e}") from None
    return result
