"""The adapter store in S3: names, immutable content versions, aliases and canaries.

:class:`AdapterStore` publishes a peft LoRA folder atomically under a content version and moves a
name's alias (promote, rollback, canary); :class:`AdapterResolver` is the ingress's cached lookup
of a name's version; :mod:`~serving.adapters.files` checks a folder before upload and after
download; :mod:`~serving.adapters.s3` is the one boundary to S3 (client environment, error
translation, conditional replace). Uses only serving's config, errors and metrics.
"""

from serving.adapters.canary import Canary, check_weight, serves_canary, session_key
from serving.adapters.files import CONFIG, WEIGHTS, content_version, validate_adapter, verify_adapter_folder
from serving.adapters.refs import AdapterRef, AliasMove, check_name, check_version, split_model_name
from serving.adapters.resolver import AdapterResolver
from serving.adapters.s3 import LOCAL_S3_CREDENTIALS, ObjectChanged, S3Bucket, export_s3_env, is_local, s3_env
from serving.adapters.store import AdapterStore

__all__ = ["CONFIG", "LOCAL_S3_CREDENTIALS", "WEIGHTS", "AdapterRef", "AdapterResolver", "AdapterStore", "AliasMove",
           "Canary", "ObjectChanged", "S3Bucket", "check_name", "check_version", "check_weight", "content_version",
           "export_s3_env", "is_local", "s3_env", "serves_canary", "session_key", "split_model_name",
           "validate_adapter", "verify_adapter_folder"]
