"""Command line: parse, call, print. No scheduling logic lives here."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time

from . import client, legacy
from .adapters import manifests
from .adapters.layout import RunLayout
from .adapters.lock import live_endpoint
from .config import load_policy
from .core.request import NAME_EXPECTED, NAME_RE
from .errors import JournalCorrupt, OwnerBusy, PolicyError

EXIT_REJECTED = 2        # the request was refused (rejected, conflict, terminal duplicate)
EXIT_NO_COORDINATOR = 69  # EX_UNAVAILABLE: no live coordinator owns the run
EXIT_DRAINED_UNKNOWN = 70  # the attempt vanished without an exit record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["profile"]:  # these two parse their own flags and pass the rest on
        from .profiler import main_profile
        return main_profile(argv[1:])
    if argv[:1] == ["bind"]:
        from .binding import main_bind
        return main_bind(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except BrokenPipeError:  # `praxist-fs status | head`
        sys.stderr.close()
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="praxist-fs", description=__doc__)
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="run the coordinator of a run directory")
    serve.add_argument("--run-dir", required=True)
    serve.add_argument("--config", help="task YAML (default: the embedded seed contract)")
    serve.add_argument("--fake-gpus", default=os.environ.get("PRAXIST_FAKE_GPUS"),
                       metavar="FILE", help="use the documented fake GPU inventory in FILE "
                       "instead of NVML (tests, demos)")
    serve.add_argument("--host-registry", default=os.environ.get("PRAXIST_HOST_REGISTRY"),
                       metavar="DIR", help="host-wide GPU allocation registry shared by the "
                       "runs of this host (default /run/praxist_fs or the runtime dir)")
    serve.add_argument("--psi-root", default=os.environ.get("PRAXIST_PSI_ROOT", "/proc/pressure"),
                       metavar="DIR", help="where to read PSI pressure files (default %(default)s)")
    serve.set_defaults(func=cmd_serve)

    launch = sub.add_parser("launch", help="submit an experiment and wait for it, like srun")
    launch.add_argument("--run-dir", default=os.environ.get("PRAXIST_RUN_DIR"))
    launch.add_argument("--peer", default=os.environ.get("PRAXIST_PEER_ID"))
    launch.add_argument("--tag", required=True)
    launch.add_argument("--profile")
    launch.add_argument("--work-class", default="ordinary")
    launch.add_argument("--eta", type=float)
    launch.add_argument("--retry-terminal", action="store_true")
    launch.add_argument("--lease")
    launch.add_argument("--max-cost", type=float, metavar="X",
                        help="reject the request if its estimated cost (eta x calibrated "
                        "ratio x GPUs x the profile's budget rate) is over X; needs --eta")
    launch.add_argument("--detach", action="store_true",
                        help="print the job id once accepted and exit 0")
    launch.add_argument("--wait-coordinator", type=float, default=10.0, metavar="SECONDS",
                        help="how long to wait for a live coordinator (default 10)")
    launch.add_argument("--config", default=os.environ.get("PRAXIST_TASK_CONFIG"),
                        metavar="TASK", help="the task YAML: one that is not 'mode: central' "
                        "runs the command peer-local when no coordinator owns or has served "
                        "the run (default $PRAXIST_TASK_CONFIG)")
    launch.add_argument("--host-registry", default=os.environ.get("PRAXIST_HOST_REGISTRY"),
                        metavar="DIR", help="where a peer-local launch registers the run "
                        "for stop --all (default as for serve)")
    launch.add_argument("cmd", nargs=argparse.REMAINDER)
    launch.set_defaults(func=cmd_launch)

    status = sub.add_parser("status", help="show the run's status.json")
    status.add_argument("--run-dir", default=os.environ.get("PRAXIST_RUN_DIR"), required=False)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    sub.add_parser("profile", add_help=False,
                   help="observe an unchanged command and propose a resource profile: "
                   "profile [--interval S] [--repeat N] [--out FILE] -- CMD")
    sub.add_parser("bind", add_help=False,
                   help="run CMD with the attempt's GPU mask verified or restored: bind -- CMD")

    from .stopper import add_stop_parser
    from .supply_client import add_supply_parsers
    add_supply_parsers(sub)
    add_stop_parser(sub)

    from .simulate import add_simulate_parser
    add_simulate_parser(sub)

    demo = sub.add_parser("demo", help="a self-contained tour on a scratch run directory")
    demo.add_argument("--run-dir", default=".demo-run")
    demo.add_argument("--config", help="task YAML (default: fixtures/tasks/example.yaml)")
    demo.set_defaults(func=cmd_demo)
    return parser


def cmd_serve(args: argparse.Namespace) -> int:
    from .daemon import Coordinator

    logging.basicConfig(level=logging.INFO, format="praxist-fs: %(message)s")
    try:
        policy = load_policy(args.config)
    except PolicyError as exc:
        print(f"praxist-fs serve: invalid task file: {exc}", file=sys.stderr)
        return 2
    if policy.mode != "central":
        print("praxist-fs serve: the task is not 'mode: central'; legacy peer-local launching "
              "has no coordinator", file=sys.stderr)
        return 2
    try:
        return Coordinator(args.run_dir, policy, fake_gpus=args.fake_gpus,
                           host_registry=args.host_registry, psi_root=args.psi_root).run()
    except (OwnerBusy, JournalCorrupt) as exc:
        print(f"praxist-fs serve: {exc}", file=sys.stderr)
        return 1


def cmd_launch(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    missing = [flag for flag, value in (("--run-dir", args.run_dir), ("--peer", args.peer))
               if not value]
    if missing or not cmd:
        print(f"praxist-fs launch: needs {', '.join(missing) or 'a command after --'}",
              file=sys.stderr)
        return 2
    layout = RunLayout.at(args.run_dir)
    try:
        if client.enclosing_attempt(layout, dict(os.environ)) is not None:
            # Inside a live attempt: the child stays in its allocation, not queued again.
            try:
                code = subprocess.call(cmd)
            except OSError as exc:
                print(f"praxist-fs launch: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
                return 127
            return 128 - code if code < 0 else code  # killed by signal N: 128 + N
    except client.NotInAttempt as exc:
        print(f"praxist-fs launch: refusing nested launch: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    try:  # a live coordinator decides, whatever the task file or the environment says
        local = live_endpoint(layout) is None and legacy.peer_local(layout, args.config)
    except PolicyError as exc:
        print(f"praxist-fs launch: invalid task file: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    if local:
        try:
            return _launch_peer_local(args, layout, cmd)
        except legacy.Deferred:
            pass  # a coordinator took the run meanwhile: the request goes to it
    try:
        client.wait_for_coordinator(layout, args.wait_coordinator)
        request = {
            "request_id": client.new_request_id(args.peer), "peer": args.peer, "tag": args.tag,
            "profile": args.profile, "work_class": args.work_class, "eta_s": args.eta,
            "argv": cmd, "cwd": os.getcwd(), "env": client.submission_env(dict(os.environ)),
            "retry_terminal": args.retry_terminal, "lease": args.lease,
            "max_cost": args.max_cost,
        }
        client.submit(layout, {k: v for k, v in request.items() if v is not None})
        reply = client.wait_for_reply(layout, request["request_id"], args.wait_coordinator)
    except client.NoCoordinator as exc:
        print(f"praxist-fs launch: {exc}", file=sys.stderr)
        return EXIT_NO_COORDINATOR
    except client.TooLarge as exc:
        print(f"praxist-fs launch: rejected: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    outcome, job_id = reply["outcome"], reply["job_id"]
    if outcome == "rejected":
        print(f"praxist-fs launch: rejected: {reply['reason']}", file=sys.stderr)
        return EXIT_REJECTED
    if outcome == "terminal_duplicate":
        print(f"praxist-fs launch: not rerun: {reply['reason']}", file=sys.stderr)
        return EXIT_REJECTED
    if args.detach:
        print(job_id)
        return 0
    cost = reply.get("estimate")
    print(f"praxist-fs launch: {outcome}: job {job_id}"
          + (f" (estimated cost {cost['cost']:g})" if cost else ""), file=sys.stderr)
    earlier = set()
    if outcome == "retry_accepted":  # show this retry's attempts, not the failed ones
        doc = client.job_document(layout, job_id) or {"attempts": []}
        earlier = {a["attempt_id"] for a in doc["attempts"] if a["ended_at"] is not None}
    final = client.follow(layout, job_id, sys.stdout.buffer, skip=earlier)
    if final["state"] == "drained_unknown":
        print(f"praxist-fs launch: job {job_id}: {final['reason']}", file=sys.stderr)
        return EXIT_DRAINED_UNKNOWN
    if final["state"] != "completed":
        print(f"praxist-fs launch: job {job_id} {final['state']}: {final['reason']}",
              file=sys.stderr)
    code = final["exit_code"]
    return code if isinstance(code, int) else 1


def _launch_peer_local(args: argparse.Namespace, layout: RunLayout, cmd: list[str]) -> int:
    """R-DUR-3: a legacy task's launch runs the command itself, recorded for stop and status."""
    bad = [flag for flag, value in (("--peer", args.peer), ("--tag", args.tag))
           if not NAME_RE.fullmatch(value)]
    needs = [flag for flag, given in (("--detach", args.detach),
                                      ("--max-cost", args.max_cost is not None)) if given]
    if bad or needs:
        print("praxist-fs launch: " + (f"{', '.join(bad)}: expected {NAME_EXPECTED}" if bad
              else f"{needs[0]} needs a coordinator (the task is not 'mode: central')"),
              file=sys.stderr)
        return EXIT_REJECTED
    try:
        return legacy.launch(layout, peer=args.peer, tag=args.tag, argv=cmd,
                             host_registry=args.host_registry, wait=args.wait_coordinator)
    except legacy.Refused as exc:
        print(f"praxist-fs launch: {exc}", file=sys.stderr)
        return 127 if isinstance(exc, legacy.NotStarted) else EXIT_REJECTED
    except legacy.Busy as exc:
        print(f"praxist-fs launch: {exc}", file=sys.stderr)
        return EXIT_NO_COORDINATOR


def cmd_status(args: argparse.Namespace) -> int:
    if not args.run_dir:
        print("praxist-fs status: needs --run-dir (or PRAXIST_RUN_DIR)", file=sys.stderr)
        return 2
    layout = RunLayout.at(args.run_dir)
    doc = client.status_document(layout)
    local = [{**launch, "age_s": manifests.age(launch)} for launch in manifests.launches(layout)]
    if doc is None and not local:
        print(f"praxist-fs status: no status.json under {args.run_dir} yet", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**(doc or {}), "peer_local_launches": local}, indent=2))
    else:
        print("\n\n".join(([format_status(doc)] if doc else [])
                          + ([format_peer_local(local)] if local else [])))
    return 0


def format_peer_local(launches: list[dict]) -> str:
    """Legacy peer-local launches, from the protected-PID manifests (R-DUR-3)."""
    lines = [f"{'PEER-LOCAL LAUNCH (TAG)':32} {'PEER':12} {'PID':>8} {'AGE':>8}  "
             f"{'STATE':12} COMMAND"]
    for launch in launches:
        age = "-" if launch["age_s"] is None else f"{launch['age_s']:.1f}s"
        command = " ".join(map(str, launch.get("argv") or []))
        lines.append(f"{str(launch.get('tag'))[:32]:32} {launch['peer'][:12]:12} "
                     f"{str(launch.get('pid')):>8} {age:>8}  {launch['state']:12} {command[:60]}")
    return "\n".join(lines)


def format_budget(budget: dict) -> str:
    """One line: the verdict and for how long, spend against each limit, and how much of
    it infrastructure failures took."""
    limits, spend, infra = budget["limits"], budget["spend"], budget["infrastructure"]

    def against(key: str) -> str:
        limit = limits[key]
        return f"{spend[key]:.4g}" + ("" if limit is None else f" of {limit:g}")

    verdict = "no limits" if budget["verdict"] is None else \
        f"{budget['verdict']} for {time.time() - budget['since']:.0f}s"
    return (f"budget {verdict}: {against('gpu_hours')} GPU-h, cost {against('cost')} "
            f"(infrastructure {infra['gpu_hours']:.4g} GPU-h, cost {infra['cost']:.4g})")


def format_status(doc: dict) -> str:
    coord = doc.get("coordinator", {})
    age = time.time() - doc.get("updated_at", 0)
    lines = [
        f"coordinator pid {coord.get('pid')} on {coord.get('host')}: {coord.get('state')} "
        f"({coord.get('observer')}, journal seq {coord.get('journal_seq')}, "
        f"updated {age:.1f}s ago)",
        f"concurrency target {doc['concurrency']['target']} "
        f"(min {doc['concurrency']['min']}, max {doc['concurrency']['max']}); "
        f"running {doc['running']}",
        "counts: " + "  ".join(f"{k} {v}" for k, v in doc["counts"].items() if v),
    ]
    pressure = doc.get("pressure", {})
    if pressure.get("source"):
        lines.append(f"pressure ({pressure['source']} avg10): " + "  ".join(
            f"{d} {'?' if v['avg10'] is None else format(v['avg10'], '.0f')}% (high {v['high']:g})"
            for d, v in pressure["domains"].items()))
    if doc.get("budget"):
        lines.append(format_budget(doc["budget"]))
    gpus = doc.get("gpus", {})
    if gpus.get("devices"):
        lines += ["", f"{'GPU (' + gpus['source'] + ')':26} {'UTIL decl+ext':>14} "
                      f"{'MEMORY GiB decl+ext/total':>26}  JOBS"]
        for d in gpus["devices"]:
            lines.append(
                f"{d['uuid'][:26]:26} {d['declared_utilization_pct']:>6.0f}+"
                f"{d['external_utilization_pct']:<3.0f}%    "
                f"{d['declared_memory_mib'] / 1024:>9.1f}+{d['external_memory_mib'] / 1024:<5.1f}"
                f"/{d['memory_total_mib'] / 1024:<6.1f}  {len(d['jobs'])}")
    elif gpus.get("error"):
        lines.append(f"gpus: {gpus['error']}")
    if doc["active"]:
        lines += ["", f"{'JOB':40} {'ATTEMPT':8} {'PID':>8} {'AGE':>8}  {'PROFILE':14} "
                      f"{'GPUS':24} ACTIVITY"]
        lines += [f"{a['job_id'][:40]:40} {a['attempt_id']:8} {str(a['pid']):>8} "
                  f"{a['age_s']:>7.1f}s  {a['profile'][:14]:14} "
                  f"{','.join(a['gpus'])[:24] or '-':24} {a['resource_activity']}"
                  + (f" {a['progress']['done']}/{a['progress']['total']}"
                     if a.get("progress") and "done" in a["progress"] else "")
                  for a in doc["active"]]
    if doc.get("suspended"):  # R-POL-3; an older coordinator's status.json has none
        lines += ["", f"{'SUSPENDED JOB':40} {'ATTEMPT':8} {'FOR':>8}  {'BY':30} WAITING"]
        lines += [f"{s['job_id'][:40]:40} {s['attempt_id']:8} {s['suspended_s']:>7.1f}s  "
                  f"{s['by'][:30]:30} {s['waiting']}" for s in doc["suspended"]]
    if doc["queue"]:
        lines += ["", f"{'QUEUED JOB':40} {'AGE':>8}  {'PROFILE':14} REASON"]
        lines += [f"{q['job_id'][:40]:40} {q['age_s']:>7.1f}s  {q['profile'][:14]:14} {q['reason']}"
                  for q in doc["queue"]]
        if doc["queue_length"] > len(doc["queue"]):
            lines.append(f"... and {doc['queue_length'] - len(doc['queue'])} more")
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.run_dir, args.config)
