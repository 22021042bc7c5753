"""The adapter store: names, immutable content versions, aliases and canaries, in S3 (or a local folder).

:class:`AdapterStore` publishes a peft LoRA folder atomically under a content version, moves a
name's alias (promote, rollback, canary), re-hashes a version's stored files (verify), downloads a
version streamed and hashed (the replica's load, a parity measurement) and keeps its parity records
(:mod:`~serving.adapters.parity`), which gate every move that starts a version serving, and records
the offline gate's decisions with their evidence (:mod:`~serving.adapters.gating`; ``GatePolicy`` is
the store's ``adapters.gate`` policy, named here for the gate, which reads the store's face only);
:class:`AdapterResolver` is the ingress's cached lookup of a name's version;
:mod:`~serving.adapters.files` checks a folder before upload and after download, and
:mod:`~serving.adapters.modules` that the engine would serve it as trained.

Every byte goes through one door, :class:`ObjectStore` (:mod:`~serving.adapters.objects`: get,
stream, put, head, delete, one paginated listing, conditional replace, in the project's errors),
which :func:`open_objects` opens for a prefix by its scheme: S3 (:mod:`~serving.adapters.s3`, the one
file that talks to boto, with the client environment: :func:`s3_env`, :func:`spec_from_env`) or a
local folder (:mod:`~serving.adapters.local`, ``file:///path``). Uses only serving's config, errors and metrics.
"""

from serving.adapters.backends import open_objects
from serving.adapters.canary import Canary, canary_of, serves_canary, session_key
from serving.adapters.checks import VerifyReport
from serving.adapters.files import CONFIG, WEIGHTS, verify_adapter_folder
from serving.adapters.gating import GateEvidence, GateTarget, gate_evidence
from serving.adapters.model_id import ModelId
from serving.adapters.modules import inspect_adapter
from serving.adapters.objects import ObjectStore
from serving.adapters.parity import NOT_COMPARED, ParityRecord, parity_label, parity_of
from serving.adapters.policies import KINDS as POLICY_KINDS
from serving.adapters.policies import in_force as policy_in_force
from serving.adapters.refs import STABLE_MOVES, AdapterRef, AliasMove, check_name, move_of, now
from serving.adapters.resolver import AdapterResolver
from serving.adapters.s3 import export_s3_env, is_local, s3_env, spec_from_env
from serving.adapters.store import AdapterStore
from serving.config import GatePolicy

__all__ = ["CONFIG", "NOT_COMPARED", "POLICY_KINDS", "STABLE_MOVES", "WEIGHTS", "AdapterRef", "AdapterResolver", "AdapterStore", "AliasMove", "Canary", "canary_of",
           "GateEvidence", "GatePolicy", "GateTarget", "ModelId", "ObjectStore", "ParityRecord", "VerifyReport",
           "check_name", "export_s3_env", "gate_evidence", "inspect_adapter", "is_local", "move_of", "now",
           "open_objects", "parity_label", "parity_of", "policy_in_force", "s3_env", "serves_canary", "session_key", "spec_from_env",
           "verify_adapter_folder"]
