"""The adapter store in S3: names, immutable content versions, aliases and canaries.

:class:`AdapterStore` publishes a peft LoRA folder atomically under a content version, moves a
name's alias (promote, rollback, canary), re-hashes a version's stored files (verify) and keeps its
parity records (:mod:`~serving.adapters.parity`); :class:`AdapterResolver` is the ingress's cached lookup
of a name's version; :mod:`~serving.adapters.files` checks a folder before upload and after
download, and :mod:`~serving.adapters.modules` that the engine would serve it as trained;
:mod:`~serving.adapters.s3` is the one boundary to S3 (client environment, error translation,
conditional replace). Uses only serving's config, errors and metrics.
"""

from serving.adapters.canary import Canary, check_weight, serves_canary, session_key
from serving.adapters.checks import VerifyReport
from serving.adapters.files import (
    CONFIG,
    WEIGHTS,
    content_version,
    content_version_of,
    download_version,
    validate_adapter,
    verify_adapter_folder,
)
from serving.adapters.modules import AdapterModules, check_servable, inspect_adapter, unsupported_features
from serving.adapters.parity import ParityRecord, parity_label
from serving.adapters.model_id import ModelId
from serving.adapters.refs import AdapterRef, AliasMove, check_name, check_version
from serving.adapters.resolver import AdapterResolver
from serving.adapters.s3 import LOCAL_S3_CREDENTIALS, ObjectChanged, S3Bucket, export_s3_env, is_local, s3_env
from serving.adapters.store import AdapterStore

__all__ = ["CONFIG", "LOCAL_S3_CREDENTIALS", "WEIGHTS", "AdapterModules", "AdapterRef", "AdapterResolver",
           "AdapterStore", "AliasMove", "Canary", "ModelId", "ObjectChanged", "ParityRecord", "S3Bucket", "VerifyReport",
           "check_name", "check_servable", "check_version", "check_weight", "content_version", "content_version_of",
           "download_version", "export_s3_env", "inspect_adapter", "is_local", "parity_label", "s3_env",
           "serves_canary", "session_key",
           "unsupported_features", "validate_adapter", "verify_adapter_folder"]
