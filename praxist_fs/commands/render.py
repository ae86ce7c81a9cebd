"""Every table and JSON document the CLI prints for people: one place for layout."""

from __future__ import annotations

import time


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


def format_status(doc: dict, alive: bool = True) -> str:
    """``alive``: whether the coordinator that wrote ``doc`` still runs (the liveness
    check ``launch`` uses); a dead one's last status is shown as such."""
    coord = doc.get("coordinator", {})
    age = time.time() - doc.get("updated_at", 0)
    if alive:
        state = f"{coord.get('state')} ({coord.get('observer')}, journal seq " \
                f"{coord.get('journal_seq')}, updated {age:.1f}s ago)"
    else:
        state = (f"NOT RUNNING (process gone; its last status, {age:.0f}s old, follows"
                 + (f"; the run is stopped: {doc['run_stopped']}" if doc.get("run_stopped")
                    else "; start one with: praxist-fs serve") + ")")
    lines = [
        f"coordinator pid {coord.get('pid')} on {coord.get('host')}: {state}",
        f"concurrency target {doc['concurrency']['target']} "
        f"(min {doc['concurrency']['min']}, max {doc['concurrency']['max']}); "
        f"running {doc['running']}",
        "counts: " + "  ".join(f"{k} {v}" for k, v in doc["counts"].items() if v),
    ]
    for case in coord.get("problems") or ():  # set aside at a start (OPERATIONS.md *Crash*)
        lines.append(f"PROBLEM: {len(case['items'])} item(s) set aside in {case['case']}: "
                     + "; ".join(item["why"] for item in case["items"]))
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
        lines += ["", f"{'QUEUED JOB':40} {'AGE':>8}  {'PRIO':>4}  {'PROFILE':14} REASON"]
        lines += [f"{q['job_id'][:40]:40} {q['age_s']:>7.1f}s  {q.get('priority', 0):>4}  "
                  f"{q['profile'][:14]:14} {q['reason']}" for q in doc["queue"]]
        if doc["queue_length"] > len(doc["queue"]):
            lines.append(f"... and {doc['queue_length'] - len(doc['queue'])} more")
    return "\n".join(lines)


def format_control_reply(reply: dict) -> str:
    """A control request's answer: its outcome, then a line per selected job."""
    lines = [f"{reply['outcome']}: {reply['reason']}"]
    for job in reply.get("jobs") or ():
        lines.append(f"  {job['job_id'][:40]:40} {job['result']:10} {job['state']:10} "
                     f"{job['reason']}")
    return "\n".join(lines)
