"""``maze-serve adapters ...``: list, push, promote, roll back, canary, verify and remove adapters, in S3
or through a gateway's management routes."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import click
import yaml

from agent.cli import json_option
from serving.cli import placement
from serving.cli.common import config_of, gateway_options, store_of
from serving.errors import BadAdapterName, BadRequest


FORCE_PARITY_HELP = ("serve the version even though its recorded parity check failed or was not compared (an admin "
                     "key through --gateway; recorded in NAME's history)")


def _parity(ref, version: str) -> str:
    from serving.adapters import parity_label

    return parity_label((ref.parity or {}).get(version))


def _warn_forced(ref, version: str, force_parity: bool) -> None:
    """Say so when a forced move leaves a version serving whose parity did not pass."""
    from serving.adapters import ModelId

    label = _parity(ref, version)
    if force_parity and (label.startswith("FAILED") or label == "not compared"):
        said = "failed" if label.startswith("FAILED") else "was not compared with a reference"
        click.echo(f"warning: {ModelId(None, ref.name, version)} serves although its parity check {said} ({label}); "
                   f"the force is recorded in `adapters history {ref.name}`", err=True)


@click.group()
@gateway_options
@click.pass_context
def adapters(ctx: click.Context, gateway: str | None, api_key: str | None) -> None:
    """List, push, promote, roll back, canary and remove LoRA adapters in the config's S3 prefix.

    With --gateway the commands go through that gateway's management routes, where the API key's
    role decides (a publisher on the names its models cover, an admin on any); without it they
    write S3 directly with the caller's AWS credentials (IAM decides; docs/serving.md)."""
    if gateway:
        ctx.find_root().obj["gateway"] = (gateway, api_key)


@adapters.command("list")
@json_option()
@click.pass_context
def adapters_list(ctx: click.Context, as_json: bool) -> None:
    """Published adapters with their versions and their parity checks (ok and the largest difference,
    FAILED, not compared when only the base's output was there to compare with, or - when none was
    recorded)."""
    cfg = config_of(ctx)
    refs = store_of(cfg).list()
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in refs], indent=2))
        return
    for r in refs:
        canary = (f"\tcanary {r.canary.version} {r.canary.weight:g}% parity {_parity(r, r.canary.version)}"
                  if r.canary else "")
        click.echo(f"{r.name}\t{r.version}\trank {r.rank}\tbase {r.base}\t{r.pushed_at}\t"
                   f"parity {_parity(r, r.version)}{canary}")


@adapters.command("push")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.argument("name")
@click.option("--base", help="base model id the adapter is for (default: the config's first)")
@click.option("--force", is_flag=True, help="replace an existing adapter of that name")
@click.option("--canary", "weight", help="do not replace the version served: make the new one NAME's canary, "
              "serving this percent of its sessions (see `adapters canary`)")
@click.option("--candidate", is_flag=True, help="do not serve the new version: record it as a candidate for the "
              "offline gate (`maze-eval gate NAME@VERSION`), which moves NAME only if it plays better")
@click.option("--force-parity", is_flag=True, help=FORCE_PARITY_HELP)
@click.pass_context
def adapters_push(ctx: click.Context, folder: str, name: str, base: str | None, force: bool, weight: str | None,
                  candidate: bool, force_parity: bool) -> None:
    """Validate FOLDER (a peft LoRA) and publish it atomically as NAME.

    A gateway serves it within its adapters.resolve_ttl_s; through --gateway, that gateway from its
    next request. Files pushed under NAME before are that same version: one whose parity check
    failed or was not compared is refused (exit 4) unless --force-parity."""
    from serving.adapters import ModelId

    cfg = config_of(ctx)
    spec = cfg.base(base) if base else cfg.base_models[0]
    if spec is None:
        raise BadRequest(f"unknown base {base!r}; known: {[m.id for m in cfg.base_models]}")
    ref = store_of(cfg).push(folder, name, base=spec.id, base_source=spec.source, max_rank=cfg.lora.max_rank, force=force,
                           canary=weight, candidate=candidate, vision_tower=cfg.lora.vision_tower,
                           force_parity=force_parity)
    if candidate:
        click.echo(f"published {ModelId(spec.id, ref.name)} version {ref.version} as a candidate (not served); "
                   f"gate it: maze-eval gate {ModelId(None, ref.name, ref.version)}")
        return
    if weight is not None:
        click.echo(f"published {ModelId(spec.id, ref.name)} version {ref.canary.version} as a canary "
                   f"({ref.canary.weight:g}%; {ref.version} serves the rest)")
        _warn_forced(ref, ref.canary.version, force_parity)
        return
    click.echo(f"published {ModelId(spec.id, ref.name)} version {ref.version}")
    _warn_forced(ref, ref.version, force_parity)


@adapters.command("rm")
@click.argument("name")
@click.pass_context
def adapters_rm(ctx: click.Context, name: str) -> None:
    """Unpublish NAME and delete its files."""
    ref = store_of(config_of(ctx)).remove(name)
    click.echo(f"removed {ref.name} (version {ref.version})")


@adapters.command("promote")
@click.argument("target", metavar="NAME@VERSION|NAME")
@click.option("--force-parity", "--force", "force_parity", is_flag=True,
              help=FORCE_PARITY_HELP + " (--force: the same)")
@click.pass_context
def adapters_promote(ctx: click.Context, target: str, force_parity: bool) -> None:
    """Point NAME at VERSION (any version ever pushed under NAME); served within the gateway's
    adapters.resolve_ttl_s (through --gateway: by that gateway from its next request).

    NAME alone promotes its running canary (which then ends). A version whose recorded parity check
    failed, or was not compared (unless the config's adapters.parity_without_reference), is refused
    (exit 4) unless --force-parity; a version never checked is not."""
    from serving.adapters import ModelId

    target_id = ModelId.adapter(target)
    ref = store_of(config_of(ctx)).promote(target_id.name, target_id.version, force_parity=force_parity)
    click.echo(f"{ref.name} -> {ref.version}")
    _warn_forced(ref, ref.version, force_parity)


@adapters.command("canary")
@click.argument("target", metavar="NAME@VERSION")
@click.option("--weight", required=True, help="percent of NAME's sessions VERSION serves (0-100)")
@click.option("--force-parity", is_flag=True, help=FORCE_PARITY_HELP)
@click.pass_context
def adapters_canary(ctx: click.Context, target: str, weight: str, force_parity: bool) -> None:
    """Serve VERSION to WEIGHT percent of NAME's sessions, its current version to the rest.

    Starts a canary, or re-weights or replaces the running one. Each session (the X-Session-Id
    header, else the OpenAI `user` field, else the request id) stays on one version. End it with
    `adapters promote NAME` or `adapters abort NAME`. A version whose parity check failed or was not
    compared is refused at any weight (exit 4), as by promote, unless --force-parity."""
    from serving.adapters import ModelId

    target_id = ModelId.adapter(target)
    if target_id.version is None:
        raise BadAdapterName(f"{target!r} names no version: use NAME@VERSION (see `adapters history NAME`)")
    ref = store_of(config_of(ctx)).canary(target_id.name, target_id.version, weight, force_parity=force_parity)
    click.echo(f"{ref.name} -> {ref.version} ({100 - ref.canary.weight:g}%), canary {ref.canary.version} "
               f"({ref.canary.weight:g}%)")
    _warn_forced(ref, ref.canary.version, force_parity)


@adapters.command("abort")
@click.argument("name")
@click.pass_context
def adapters_abort(ctx: click.Context, name: str) -> None:
    """End NAME's canary unpromoted: its current version serves every session again."""
    ref = store_of(config_of(ctx)).abort_canary(name)
    click.echo(f"{ref.name} -> {ref.version}")


@adapters.command("rollback")
@click.argument("name")
@click.option("--force-parity", is_flag=True, help=FORCE_PARITY_HELP)
@click.pass_context
def adapters_rollback(ctx: click.Context, name: str, force_parity: bool) -> None:
    """Point NAME back at the version it served before its last move; that version is refused (exit 4),
    as by promote, when its parity check failed or was not compared, unless --force-parity."""
    ref = store_of(config_of(ctx)).rollback(name, force_parity=force_parity)
    click.echo(f"{ref.name} -> {ref.version}")
    _warn_forced(ref, ref.version, force_parity)


@adapters.command("history")
@click.argument("name")
@json_option()
@click.pass_context
def adapters_history(ctx: click.Context, name: str, as_json: bool) -> None:
    """NAME's moves, newest first: version, time, action, then a canary's weight and the version's
    parity check (ok and the largest difference, FAILED, not compared, or -), and for a move forced
    past parity what it was forced past and by which key, for an offline gate's decision (`maze-eval
    gate`: a promote, or a `gate` line where it left NAME) and for the live guard's (an abort, a promote or
    a `guard` line) their evidence, for a move the store made
    why (the first stable move, push, promote or rollback, is the version served)."""
    store = store_of(config_of(ctx))
    moves, parity = store.history(name), store.parity(name)
    if as_json:
        records = {v: dataclasses.asdict(r) for v, r in parity.items()}
        click.echo(json.dumps([{**m.__dict__, "parity": records.get(m.version)} for m in moves], indent=2))
        return
    from serving.adapters import parity_label

    for m in moves:
        weight = f"{m.weight:g}% " if m.weight is not None else ""
        forced = f"\tforced past parity {m.forced}" + (f" by key {m.by!r}" if m.by else "") if m.forced else ""
        reason = f"\t{m.reason}" if m.reason else ""
        click.echo(f"{m.version}\t{m.at}\t{m.action}\t{weight}parity {parity_label(parity.get(m.version))}"
                   f"{forced}{_gate_evidence(m.gate)}{_guard_evidence(m.guard)}{reason}")


def _gate_evidence(gate: dict | None) -> str:
    """An offline gate's evidence in one column (empty for a move the gate did not make)."""
    if not gate:
        return ""
    needed = "-" if gate.get("wins_needed") is None else gate["wins_needed"]
    return (f"\tgate {gate['verdict']} vs {gate['against']}: {gate['wins']} wins {gate['losses']} losses on "
            f"{gate['seeds']} seeds (needed {needed}), one-sided p {gate['p_value']:.3g}, alpha {gate['alpha']:g} "
            f"over looks {gate['looks']}; runs {gate['run']} vs {gate['run_against']}")


def _guard_evidence(guard: dict | None) -> str:
    """A live guard's evidence in one column (empty for a move the guard did not make)."""
    if not guard:
        return ""
    return (f"\tguard vs {guard['against']}: {guard['wins']} wins {guard['losses']} losses {guard['ties']} ties, "
            f"e-value worse {guard['e_worse']:g} better {guard['e_better']:g}; sessions canary "
            f"{guard['canary_sessions']} stable {guard['stable_sessions']}")


@adapters.command("guard")
@click.argument("name")
@json_option()
@click.pass_context
def adapters_guard(ctx: click.Context, name: str, as_json: bool) -> None:
    """NAME's live guard: its policy (adapters.guard) and the ledger of its current or last canary run,
    the sessions each arm reported, the pairs, the e-values and the verdict, if one was reached."""
    cfg = config_of(ctx)
    store = store_of(cfg)
    if hasattr(store, "guard"):  # through --gateway
        state = store.guard(name)
    else:
        from serving.guard import CanaryGuard

        state = CanaryGuard(store, cfg.adapters.guard).state(name)
    if as_json:
        click.echo(json.dumps(state, indent=2))
        return
    policy, ledger = state["policy"], state["ledger"]
    click.echo(f"{name}: guard {'on' if policy['enabled'] else 'off'}, rollback at alpha {policy['alpha_rollback']:g}, "
               f"{'promotes' if policy['promote'] else 'records'} a better canary at alpha {policy['alpha_promote']:g}, "
               f"at least {policy['min_discordant']} discordant pairs")
    if ledger is None:
        click.echo("no canary judged yet")
        return
    ev = ledger["evidence"]
    click.echo(f"canary {ledger['canary']} (since {ledger['started_at']}) vs {ledger['stable']}: "
               f"{ev['canary_solved']}/{ev['canary_sessions']} solved against {ev['stable_solved']}/{ev['stable_sessions']}; "
               f"pairs {ev['wins']} won {ev['losses']} lost {ev['ties']} tied; e-value worse {ev['e_worse']:g}, "
               f"better {ev['e_better']:g}")
    for key in ("found_better", "verdict"):
        if ledger.get(key):
            click.echo(f"{ledger[key]['action']}: {ledger[key]['reason']} ({ledger[key]['outcome']})")


def _changes(pairs: tuple[str, ...], option: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as policy changes (values read as YAML: true, 0.01, [16, 32])."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: give KEY=VALUE (e.g. promote=true)", param_hint=option)
        out[key.strip()] = yaml.safe_load(value)
    return out


@adapters.command("policy")
@click.argument("name")
@click.option("--gate", "gate_changes", multiple=True, metavar="KEY=VALUE",
              help="change a field of NAME's offline gate policy (adapters.gate), e.g. alpha=0.01")
@click.option("--guard", "guard_changes", multiple=True, metavar="KEY=VALUE",
              help="change a field of NAME's live guard policy (adapters.guard), e.g. promote=true")
@click.option("--reset", type=click.Choice(["gate", "guard"]), multiple=True,
              help="drop NAME's own changes to that policy: the config's applies again")
@json_option()
@click.pass_context
def adapters_policy(ctx: click.Context, name: str, gate_changes: tuple[str, ...], guard_changes: tuple[str, ...],
                    reset: tuple[str, ...], as_json: bool) -> None:
    """NAME's offline gate and live guard policies in force (the serving config's with NAME's own
    changes), or with --gate/--guard/--reset, change them: recorded in NAME's history; through
    --gateway, a key that may promote NAME."""
    store = store_of(config_of(ctx))
    view = store.policy_view(name)
    for kind, pairs in (("gate", gate_changes), ("guard", guard_changes)):
        if pairs or kind in reset:
            changes = {} if kind in reset else {**view["changes"][kind], **_changes(pairs, f"--{kind}")}
            store.set_policy(name, kind, changes)
    view = store.policy_view(name) if gate_changes or guard_changes or reset else view
    if as_json:
        click.echo(json.dumps(view, indent=2))
        return
    for kind in ("gate", "guard"):
        own = view["changes"][kind]
        fields = ", ".join(f"{k}={v}" for k, v in view[kind].items())
        click.echo(f"{kind}: {fields}" + (f"\t(changed here: {', '.join(sorted(own))})" if own else ""))


@adapters.command("gate", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def adapters_gate(args: tuple[str, ...]) -> None:
    """Points to `maze-eval gate NAME@VERSION`: the offline gate plays episodes through the gateway,
    which maze-serve does not do (the gateway imports no agent or evaluation code)."""
    raise click.UsageError("the offline gate plays episodes, so it is maze-eval's: run `maze-eval gate "
                           f"{' '.join(args) or 'NAME@VERSION'}` (docs/lifecycle.md, \"The offline gate\")")


@adapters.command("verify")
@click.argument("target", metavar="NAME[@VERSION]")
@click.option("--parity", is_flag=True,
              help="also check that the gateway serves the version as trained: its first-token logprobs on fixed "
                   "maze frames against HF + peft on its files (where the base's weights are here) and against "
                   "the base; the result is kept with the version (`adapters history`)")
@click.option("--endpoint", help="the gateway to check with --parity (OpenAI base URL; default: --gateway, else "
                                 "this config's local gateway)")
@json_option()
@click.pass_context
def adapters_verify(ctx: click.Context, target: str, parity: bool, endpoint: str | None, as_json: bool) -> None:
    """Re-hash VERSION's stored files (default: the version NAME serves); they must hash to VERSION.

    Exits 2 when they do not: they changed after publishing, and are not what was published. With
    --parity, exits 1 when the version is not served as trained (parity FAILED; if NAME serves it,
    it stops: its canary ends, or NAME rolls back to the version before when that one passes). A
    check with no reference to compare with (the base's weights not here) is `not compared`: exit 0,
    and moves that would start the version serving refuse it unless the config's
    adapters.parity_without_reference."""
    from serving.adapters import ModelId

    cfg = config_of(ctx)
    target_id = ModelId.adapter(target)
    name = target_id.name
    store = store_of(cfg)
    report = store.verify(name, target_id.version)
    checked = ModelId(None, report.name, report.version)
    out = {**dataclasses.asdict(report), "ok": report.ok}
    record = stopped = None
    if parity:
        record = _measure_parity(ctx, cfg, name, report.version, endpoint)
        stopped = _stopped_by(store, name, record)
        out["parity"] = dataclasses.asdict(record)
        out["stopped"] = dataclasses.asdict(stopped) if stopped else None
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(f"{checked} ok: the stored files ({report.weights_bytes} bytes of weights) "
                   f"hash to {report.actual}")
        if record is not None:
            click.echo(f"{checked} parity {record.state} against {record.reference}: {record.detail}")
        if stopped is not None:
            click.echo(f"{name}: {stopped.reason} ({stopped.action}; `adapters history {name}`)")
    if record is not None and record.ok is False:
        ctx.exit(1)


def _stopped_by(store, name: str, record):
    """The move the store made when ``record`` (a failed one) stopped its version serving, if it did:
    the newest move, when the store made it (a ``reason``) since the record."""
    if record.ok is not False:
        return None
    newest = store.history(name)[0]
    return newest if newest.reason and newest.at >= record.at else None


def _measure_parity(ctx: click.Context, cfg, name: str, version: str, endpoint: str | None):
    from serving.parity import Gateway, check_served

    gateway = ctx.find_root().obj.get("gateway")
    url = endpoint or (gateway[0] if gateway else f"http://127.0.0.1:{cfg.port}")
    key = gateway[1] if gateway else os.environ.get("MAZE_API_KEY")
    url = url.rstrip("/") if url.rstrip("/").endswith("/v1") else url.rstrip("/") + "/v1"
    _, record = check_served(cfg, Gateway(url, key), name, version)
    return record


for _command in placement.COMMANDS:
    adapters.add_command(_command)

COMMANDS = [adapters]
