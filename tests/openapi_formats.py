"""The formats of Kubernetes' OpenAPI schemas (and the TFJob CRD's) that jsonschema does not check itself.

One FormatChecker for every manifest test (tests/test_export.py, tests/test_export_job.py): without it
`replicas: 2**31` passes a schema that says `format: int32`, and the API server would refuse it.
"""
from __future__ import annotations

import base64

import jsonschema

FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("int32")
def _int32(value) -> bool:
    return not isinstance(value, int) or -2**31 <= value < 2**31


@FORMATS.checks("int64")
def _int64(value) -> bool:
    return not isinstance(value, int) or -2**63 <= value < 2**63


@FORMATS.checks("byte", raises=ValueError)
def _byte(value) -> bool:  # base64, as a ConfigMap's binaryData and a Secret's data hold
    return not isinstance(value, str) or base64.b64decode(value, validate=True) is not None
