"""The KServe / Open Inference Protocol v2 over HTTP: JSON tensors, plus Triton's binary
tensor extension (``binary_data_size`` / ``Inference-Header-Content-Length``), which
``tritonclient.http`` uses by default.

Only decoding and encoding live here; every malformed request raises ``ProtocolError`` with
the HTTP status and one line naming what was wrong, whatever the body holds (nesting depth,
sizes, element types): a malformed request is never a server error.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import numpy as np

from inference_pipeline.serving.config import TensorSpec
from inference_pipeline.serving.models import V2_TO_NUMPY

HEADER_LENGTH = "Inference-Header-Content-Length"
MAX_DATA_DEPTH = 32  # nested 'data' lists deeper than this are refused (tensors have few axes)
# The JSON value types each datatype's 'data' elements may have (bool is not a number here).
_INTEGER = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")


class ProtocolError(Exception):
    """A request the protocol refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class InferRequest:
    id: str | None
    inputs: dict[str, np.ndarray]
    requested_outputs: list[str] | None
    binary_outputs: set[str] = field(default_factory=set)
    binary_default: bool = False
    priority: int = 0
    timeout_us: int | None = None


def _int_param(parameters: dict, key: str) -> int | None:
    value = parameters.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(f"parameter {key!r} must be a non-negative integer")
    return value


def _decode_bytes_elements(raw: bytes, name: str) -> list[bytes]:
    """Triton's BYTES serialization: each element is a 4-byte little-endian length + bytes."""
    items, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise ProtocolError(f"input {name!r}: truncated BYTES element")
        (size,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + size > len(raw):
            raise ProtocolError(f"input {name!r}: truncated BYTES element")
        items.append(raw[offset : offset + size])
        offset += size
    return items


def _flatten(data: object, depth: int = 0) -> list:
    if not isinstance(data, list):
        raise ProtocolError("tensor 'data' must be a list")
    if depth > MAX_DATA_DEPTH:
        raise ProtocolError(f"tensor 'data' nested deeper than {MAX_DATA_DEPTH} lists")
    if data and isinstance(data[0], list):
        return [item for part in data for item in _flatten(part, depth + 1)]
    return data


def _check_element_types(name: str, values: list, datatype: str) -> None:
    """Every element of ``values`` has a JSON type that ``datatype`` can hold exactly."""
    if datatype == "BOOL":
        ok = all(isinstance(v, bool) for v in values)
    elif datatype in _INTEGER:
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    else:  # FP16 / FP32 / FP64
        ok = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if not ok:
        raise ProtocolError(f"input {name!r}: data is not {datatype}")


def _check_shape(name: str, shape: object, spec: TensorSpec) -> tuple[int, ...]:
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise ProtocolError(f"input {name!r}: 'shape' must be a list of non-negative integers")
    expected = [-1, *spec.dims]
    if len(shape) != len(expected) or any(
        want != -1 and got != want for got, want in zip(shape, expected, strict=True)
    ):
        raise ProtocolError(f"input {name!r}: shape {shape} does not match {expected}")
    if shape[0] == 0:
        raise ProtocolError(f"input {name!r}: empty batch (first dimension is 0)")
    return tuple(shape)


def _decode_tensor(entry: object, specs: dict[str, TensorSpec], binary: memoryview, offset: int):
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ProtocolError("each input must be an object with a 'name'")
    name = entry["name"]
    if name not in specs:
        raise ProtocolError(f"unknown input {name!r}; this model takes {sorted(specs)}")
    spec = specs[name]
    if entry.get("datatype") != spec.datatype:
        raise ProtocolError(
            f"input {name!r}: datatype {entry.get('datatype')!r}, expected {spec.datatype!r}"
        )
    shape = _check_shape(name, entry.get("shape"), spec)
    count = 1
    for dim in shape:  # Python ints: a huge shape cannot overflow into a small count
        count *= dim
    params = entry.get("parameters") or {}
    if not isinstance(params, dict):
        raise ProtocolError(f"input {name!r}: 'parameters' must be an object")
    size = _int_param(params, "binary_data_size")
    if size is not None:
        if offset + size > len(binary):
            raise ProtocolError(f"input {name!r}: binary_data_size beyond the request body")
        raw = bytes(binary[offset : offset + size])
        offset += size
        if spec.datatype == "BYTES":
            values = _decode_bytes_elements(raw, name)
        else:
            dtype = np.dtype(V2_TO_NUMPY[spec.datatype]).newbyteorder("<")
            if len(raw) != count * dtype.itemsize:
                raise ProtocolError(
                    f"input {name!r}: {len(raw)} bytes do not fill shape {list(shape)}"
                )
            array = np.frombuffer(raw, dtype=dtype).reshape(shape)
            return name, array.astype(dtype.newbyteorder("="), copy=False), offset
    else:
        if "data" not in entry:
            raise ProtocolError(f"input {name!r}: no 'data' and no binary_data_size")
        values = _flatten(entry["data"])
    if len(values) != count:
        raise ProtocolError(
            f"input {name!r}: {len(values)} elements do not fill shape {list(shape)}"
        )
    if spec.datatype == "BYTES":
        if not all(isinstance(v, str | bytes) for v in values):
            raise ProtocolError(f"input {name!r}: BYTES data must be strings")
        array = np.array(values, dtype=object).reshape(shape)
    else:
        _check_element_types(name, values, spec.datatype)
        try:
            array = np.asarray(values, dtype=V2_TO_NUMPY[spec.datatype]).reshape(shape)
        except (TypeError, ValueError, OverflowError):  # e.g. 2**70 for INT64, 300 for UINT8
            raise ProtocolError(f"input {name!r}: data does not fit {spec.datatype}") from None
    return name, array, offset


def parse_infer_request(
    body: bytes, header_length: str | None, specs: dict[str, TensorSpec]
) -> InferRequest:
    """Decode a v2 infer request body (JSON, or JSON header + binary tensors)."""
    try:
        json_size = len(body) if header_length is None else int(header_length)
    except ValueError:
        raise ProtocolError(f"{HEADER_LENGTH} is not an integer") from None
    if not 0 <= json_size <= len(body):
        raise ProtocolError(f"{HEADER_LENGTH} {json_size} outside the body ({len(body)} bytes)")
    try:
        document = json.loads(body[:json_size])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("malformed JSON: nested too deeply") from None
    if not isinstance(document, dict) or not isinstance(document.get("inputs"), list):
        raise ProtocolError("request must be a JSON object with an 'inputs' list")
    parameters = document.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ProtocolError("'parameters' must be an object")
    binary, offset, inputs = memoryview(body)[json_size:], 0, {}
    for entry in document["inputs"]:
        name, array, offset = _decode_tensor(entry, specs, binary, offset)
        if name in inputs:
            raise ProtocolError(f"input {name!r} given twice")
        inputs[name] = array
    missing = set(specs) - set(inputs)
    if missing:
        raise ProtocolError(f"missing inputs {sorted(missing)}")
    requested, binary_outputs = None, set()
    if document.get("outputs") is not None:
        if not isinstance(document["outputs"], list):
            raise ProtocolError("'outputs' must be a list")
        requested = []
        for entry in document["outputs"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ProtocolError("each requested output must be an object with a 'name'")
            requested.append(entry["name"])
            output_parameters = entry.get("parameters") or {}
            if not isinstance(output_parameters, dict):
                raise ProtocolError(f"output {entry['name']!r}: 'parameters' must be an object")
            if output_parameters.get("binary_data"):
                binary_outputs.add(entry["name"])
    request_id = document.get("id")
    return InferRequest(
        id=str(request_id) if request_id is not None else None,
        inputs=inputs,
        requested_outputs=requested,
        binary_outputs=binary_outputs,
        binary_default=bool(parameters.get("binary_data_output", False)),
        priority=_int_param(parameters, "priority") or 0,
        timeout_us=_int_param(parameters, "timeout"),
    )


def _encode_bytes_elements(array: np.ndarray) -> bytes:
    parts = []
    for item in array.reshape(-1):
        data = item if isinstance(item, bytes) else str(item).encode()
        parts.append(struct.pack("<I", len(data)) + data)
    return b"".join(parts)


def encode_infer_response(
    model_name: str,
    model_version: str,
    request: InferRequest,
    outputs: dict[str, np.ndarray],
    datatypes: dict[str, str],
) -> tuple[bytes, int | None]:
    """The response body, and the JSON header's length if binary tensors follow it."""
    names = request.requested_outputs or list(outputs)
    unknown = [name for name in names if name not in outputs]
    if unknown:
        raise ProtocolError(f"unknown requested output(s) {unknown}; available {list(outputs)}")
    tensors, blobs = [], []
    for name in names:
        array, datatype = outputs[name], datatypes[name]
        tensor = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if request.binary_default or name in request.binary_outputs:
            blob = (
                _encode_bytes_elements(array)
                if datatype == "BYTES"
                else np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
            )
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif datatype == "BYTES":
            tensor["data"] = [
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                for v in array.reshape(-1)
            ]
        else:
            tensor["data"] = array.reshape(-1).tolist()
        tensors.append(tensor)
    document = {"model_name": model_name, "model_version": model_version, "outputs": tensors}
    if request.id is not None:
        document["id"] = request.id
    header = json.dumps(document, separators=(",", ":")).encode()
    if not blobs:
        return header, None
    return header + b"".join(blobs), len(header)
