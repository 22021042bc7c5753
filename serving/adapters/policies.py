"""A name's own changes to its decision policies: the offline gate's (``adapters.gate``) and the live
guard's (``adapters.guard``), kept in the name's ref beside its alias.

The serving config sets a default for every name and per-name changes (``names``); the people who
publish a name may change its policies too, without a redeploy: ``maze-serve adapters policy NAME
--guard promote=true`` (``PUT /v1/adapters/{name}/policy``, for a key that may promote the name, as
the gate's own routes ask). The policy in force is the config's for the name with the ref's changes
on top, each checked by the policy's own model (an unknown field or a value out of range is a 400
naming it); a change is one conditional write of the ref, recorded in its history (``policy``, with
what changed and, through the gateway with auth on, the key that changed it).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from serving.adapters.refs import POLICY, AliasMove, now, with_move
from serving.errors import BadRequest

KINDS = ("gate", "guard")


def changes_of(doc: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    """The ref's own changes to its ``kind`` policy ({} when none)."""
    return dict(((doc or {}).get("policy") or {}).get(kind) or {})


def in_force(configured: BaseModel, doc: dict[str, Any] | None, kind: str) -> Any:
    """The policy in force: ``configured`` (the config's for the name) with the ref's changes on top.
    A change the config can no longer take (a field removed) is ignored rather than failing every
    request of the name: :func:`checked` refused it when it was made."""
    changes = changes_of(doc, kind)
    if not changes:
        return configured
    try:
        return type(configured).model_validate({**configured.model_dump(), **changes})
    except ValidationError:
        return configured


def checked(configured: BaseModel, kind: str, changes: Any) -> dict[str, Any]:
    """``changes`` to a ``kind`` policy, checked against its model on top of ``configured``.

    Raises:
        BadRequest (400): not a mapping, an unknown kind or field, or a value the policy refuses.
    """
    if kind not in KINDS:
        raise BadRequest(f"policy kind {kind!r} is not one of {', '.join(KINDS)}")
    if not isinstance(changes, dict):
        raise BadRequest(f"{kind} policy changes must be a mapping of field to value, got {type(changes).__name__}")
    try:
        type(configured).model_validate({**configured.model_dump(), **changes})
    except ValidationError as exc:
        why = "; ".join(f"{'.'.join(map(str, e['loc'])) or kind}: {e['msg']}" for e in exc.errors())
        raise BadRequest(f"{kind} policy: {why}") from None
    return dict(changes)


def with_changes(doc: dict[str, Any], kind: str, changes: dict[str, Any], by: str | None) -> dict[str, Any]:
    """The ref ``doc`` with its ``kind`` changes replaced by ``changes`` ({}: back to the config's),
    the change recorded in its history (pure)."""
    policy = {**(doc.get("policy") or {}), kind: changes}
    policy = {k: v for k, v in policy.items() if v}
    shown = ", ".join(f"{k}={v}" for k, v in sorted(changes.items())) or "the config's"
    move = AliasMove(version=doc["version"], at=now(), action=POLICY, base=doc.get("base"), rank=doc.get("rank"),
                     reason=f"{kind} policy: {shown}", by=by)
    new = {k: v for k, v in doc.items() if k != "policy"}
    return {**new, **({"policy": policy} if policy else {}), "history": with_move(doc, move)}


__all__ = ["KINDS", "changes_of", "checked", "in_force", "with_changes"]
