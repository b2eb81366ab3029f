#!/usr/bin/env python3
"""A Corral batch plugin (exec protocol version 1) over a tiny batch system of its own: each job
is a background process on this host. Python 3 standard library only.

Bind a group to it with (API, PUT /api/v1/groups/{g}/batch):
    {"system": "exec", "options": {"command": "/path/to/local_batch.py",
                                   "env": {"LOCAL_BATCH_DIR": "/var/lib/local-batch"}}}

Try it by hand:
    echo '{"version": 1, "op": "nodes"}' | LOCAL_BATCH_DIR=/tmp/lb ./local_batch.py nodes

State: $LOCAL_BATCH_DIR/state.json (default ~/.local/state/local-batch), read and written under
an exclusive lock since calls may overlap; and per job $LOCAL_BATCH_DIR/jobs/<id>/: its script,
its output (unless the job names files) and `exit`, the exit status its wrapper writes when the
script ends. There is no daemon: a job that may not start yet (held, or the node drained, or
the queue down) is started by the first call that finds it may.

One node (this host) and one queue (`local`); arrays and dependencies are unsupported, and
walltime, account and native options are ignored.
"""

import contextlib
import fcntl
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time

VERSION = 1
QUEUE = "local"
# Runs the script, then records its exit status (128 + n after signal n) atomically. Signals
# sent to the job's process group are caught (`:`) so that the wrapper outlives them; the
# script, started after, gets them with their default action.
WRAPPER = 'trap : HUP INT QUIT TERM USR1 USR2 ALRM; sh "$1"; echo $? > "$2.tmp" && mv "$2.tmp" "$2"'
FINAL = ("done", "failed", "cancelled")


class PluginError(Exception):
    """A failure of a class Corral tells apart: refused, no_such_job or unsupported."""

    def __init__(self, cls, message):
        super().__init__(message)
        self.cls = cls


def refused(message):
    return PluginError("refused", message)


def root():
    default = os.path.join(os.path.expanduser("~"), ".local", "state", "local-batch")
    return os.environ.get("LOCAL_BATCH_DIR") or default


def job_dir(job_id):
    return os.path.join(root(), "jobs", job_id)


# --- state ----------------------------------------------------------------------------------


@contextlib.contextmanager
def state():
    """state.json under an exclusive lock, saved atomically when the call is done; jobs that
    may start are started on the way in and out."""
    os.makedirs(os.path.join(root(), "jobs"), exist_ok=True)
    path = os.path.join(root(), "state.json")
    with open(os.path.join(root(), "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            data = {"next_id": 1, "jobs": {}, "drained": None, "queue": "up"}
        try:
            dispatch(data)
            yield data
            dispatch(data)
        finally:
            with open(f"{path}.tmp", "w") as f:
                json.dump(data, f, indent=1)
            os.replace(f"{path}.tmp", path)


def dispatch(data):
    """Starts, in order of submission, every job waiting for nothing."""
    if data["drained"] is not None or data["queue"] == "down":
        return
    for job in sorted(data["jobs"].values(), key=lambda j: int(j["id"])):
        if job["pid"] is None and not (job["held"] or job["cancelled"] or job["error"]):
            start(job)


def start(job):
    exit_path = os.path.join(job_dir(job["id"]), "exit")
    argv = ["/bin/sh", "-c", WRAPPER, "local-batch", job["script"], exit_path]
    try:
        with contextlib.ExitStack() as files:
            stdin = files.enter_context(open(job["stdin"] or os.devnull, "rb"))
            stdout = files.enter_context(open(job["stdout"], "ab"))
            same = job["stderr"] == job["stdout"]
            stderr = subprocess.STDOUT if same else files.enter_context(open(job["stderr"], "ab"))
            # A session of its own: it outlives this call, and is cancelled as a group. Its
            # output goes to files, never to ours (Corral waits for our output to close).
            # The job knows its own id, as every scheduler's jobs do (a pilot names itself).
            env = dict(os.environ, CORRAL_BATCH_JOB_ID=str(job["id"]))
            proc = subprocess.Popen(argv, cwd=job["directory"], stdin=stdin, stdout=stdout,
                                    stderr=stderr, env=env, start_new_session=True)
    except OSError as e:
        job["error"] = f"could not start: {e}"
        job["ended_at"] = int(time.time())
        return
    job["pid"], job["ticks"], job["started_at"] = proc.pid, start_ticks(proc.pid), int(time.time())


def proc_stat(pid):
    """(state, start time in clock ticks) from /proc/<pid>/stat, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold anything: count from the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[19])


def start_ticks(pid):
    stat = proc_stat(pid)
    return stat[1] if stat else None


def alive(job):
    """Whether the job's wrapper still runs (the same process: pids are reused)."""
    stat = proc_stat(job["pid"])
    return stat is not None and stat[0] not in ("Z", "X") and stat[1] == job["ticks"]


def exit_status(job):
    """(status, when it was written) from the wrapper's `exit` file, or (None, None)."""
    path = os.path.join(job_dir(job["id"]), "exit")
    try:
        with open(path) as f:
            return int(f.read().strip()), int(os.stat(path).st_mtime)
    except (OSError, ValueError):
        return None, None


def status(job, data):
    """(state, native state, reason, exit code, ended at) of a job, as Corral reads them."""
    code, ended = exit_status(job)
    if job["cancelled"]:
        return "cancelled", "CANCELLED", None, code, job["ended_at"]
    if job["error"]:
        return "failed", "FAILED", job["error"], None, job["ended_at"]
    if job["pid"] is None:
        if job["held"]:
            return "held", "HELD", "held until released", None, None
        why = "node drained" if data["drained"] is not None else f"queue {QUEUE} is down"
        return "queued", "QUEUED", why, None, None
    if code is None and alive(job):
        return "running", "RUNNING", None, None, None
    if code is None:
        code, ended = exit_status(job)  # it may have ended since the first look
    if code is None:
        return "failed", "LOST", "ended without an exit status", None, None
    return ("done" if code == 0 else "failed"), "EXITED", None, code, ended


def view(job, data):
    state_, native, reason, code, ended = status(job, data)
    answer = {
        "id": job["id"],
        "name": job["name"],
        "user": job["user"],
        "state": state_,
        "native_state": native,
        "reason": reason,
        "exit_code": code,
        "queue": QUEUE,
        "nodes": socket.gethostname() if job["pid"] is not None else None,
        "submitted_at": job["submitted_at"],
        "started_at": job["started_at"],
        "ended_at": ended,
    }
    return {k: v for k, v in answer.items() if v is not None}


def find(data, request):
    job = data["jobs"].get(request["id"])
    if job is None:
        raise PluginError("no_such_job", f"no job {request['id']}")
    return job


# --- operations -----------------------------------------------------------------------------


def op_submit(request, data):
    spec = request["spec"]
    if spec.get("array"):
        raise PluginError("unsupported", "run job arrays")
    if spec.get("dependencies"):
        raise PluginError("unsupported", "start a job after others")
    if data["queue"] != "up":
        raise refused(f"queue {QUEUE} is {data['queue']}: it takes no new jobs")
    if spec.get("queue", QUEUE) != QUEUE:
        raise refused(f"no queue {spec['queue']!r}: there is one, {QUEUE!r}")
    resources = spec.get("resources", {})
    cpus = resources.get("tasks", 1) * resources.get("cpus_per_task", 1)
    if resources.get("nodes", 1) > 1 or cpus > (os.cpu_count() or 1):
        raise refused(f"{resources.get('nodes', 1)} node(s) of {cpus} CPUs asked: "
                      f"there is one node of {os.cpu_count()} CPUs")
    directory = spec.get("directory") or os.path.expanduser("~")
    if not os.path.isdir(directory):
        raise refused(f"directory {directory} does not exist")
    job_id = str(data["next_id"])
    data["next_id"] += 1
    os.makedirs(job_dir(job_id), exist_ok=True)
    script = os.path.join(job_dir(job_id), "script")
    with open(script, "w") as f:
        f.write(request["script"])

    def path(name, default):
        given = spec.get(name)
        return os.path.join(directory, given) if given else default

    stdout = path("stdout", os.path.join(job_dir(job_id), "output"))
    data["jobs"][job_id] = {
        "id": job_id,
        "name": request["name"],
        "user": pwd.getpwuid(os.getuid()).pw_name,
        "script": script,
        "directory": directory,
        "stdin": path("stdin", None),
        "stdout": stdout,
        "stderr": path("stderr", stdout),
        "cpus": cpus,
        "memory": resources.get("memory_per_node", 0),
        "held": bool(spec.get("hold")),
        "cancelled": False,
        "error": None,
        "pid": None,
        "ticks": None,
        "submitted_at": int(time.time()),
        "started_at": None,
        "ended_at": None,
    }
    return {"id": job_id}


def op_jobs(request, data):
    wanted = request.get("filter", {})
    jobs = [view(j, data) for j in sorted(data["jobs"].values(), key=lambda j: int(j["id"]))]
    return {"jobs": [j for j in jobs if all(j.get(k) == v for k, v in wanted.items())]}


def op_job(request, data):
    return {"job": view(find(data, request), data)}


def op_cancel(request, data):
    job = find(data, request)
    if status(job, data)[0] in FINAL:
        raise refused(f"job {job['id']} has ended")
    job["cancelled"], job["ended_at"] = True, int(time.time())
    if job["pid"] is not None and alive(job):
        os.killpg(job["pid"], signal.SIGKILL)  # the wrapper, the script and what it started
    return {}


def op_hold(request, data):
    job = find(data, request)
    if status(job, data)[0] not in ("queued", "held"):
        raise refused(f"job {job['id']} has started: only a waiting job can be held")
    job["held"] = True
    return {}


def op_release(request, data):
    job = find(data, request)
    if status(job, data)[0] != "held":
        raise refused(f"job {job['id']} is not held")
    job["held"] = False
    return {}


def op_signal(request, data):
    job = find(data, request)
    if status(job, data)[0] != "running":
        raise refused(f"job {job['id']} is not running")
    os.killpg(job["pid"], getattr(signal, "SIG" + request["signal"]))
    return {}


def meminfo_total():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def op_nodes(request, data):
    running = [j for j in data["jobs"].values() if status(j, data)[0] == "running"]
    cpus, memory = os.cpu_count() or 1, meminfo_total()
    used = min(cpus, sum(j["cpus"] for j in running))
    if data["drained"] is not None:
        state_ = "draining" if running else "drained"
    else:
        state_ = "idle" if used == 0 else "mixed" if used < cpus else "allocated"
    node = {
        "name": socket.gethostname(),
        "state": state_,
        "native_state": state_.upper(),
        "cpus": cpus,
        "cpus_allocated": used,
        "memory": memory,
        "memory_allocated": min(memory, sum(j["memory"] for j in running)),
        "gpus": 0,
        "queues": [QUEUE],
    }
    if data["drained"] is not None:
        node["reason"] = data["drained"]
    return {"nodes": [node]}


def op_config(request, data):
    queue = {"name": QUEUE, "state": data["queue"], "default": True, "nodes": socket.gethostname()}
    settings = {"SchedulerType": "fifo", "MaxNodesPerJob": "1", "Arrays": "no"}
    return {"config": {"scheduler": "local_batch", "version": "1", "settings": settings,
                       "queues": [queue]}}


def op_apply(request, data):
    change = request["change"]
    if change["kind"] in ("drain_node", "resume_node"):
        if change["node"] != socket.gethostname():
            raise refused(f"no node {change['node']!r}: there is one, {socket.gethostname()!r}")
        data["drained"] = change["reason"] if change["kind"] == "drain_node" else None
    elif change["kind"] == "queue_state":
        if change["queue"] != QUEUE:
            raise refused(f"no queue {change['queue']!r}: there is one, {QUEUE!r}")
        data["queue"] = change["state"]
    else:
        raise PluginError("unsupported", f"make a change of kind {change['kind']!r}")
    return {}


OPS = {
    "submit": op_submit, "jobs": op_jobs, "job": op_job, "cancel": op_cancel, "hold": op_hold,
    "release": op_release, "signal": op_signal, "nodes": op_nodes, "config": op_config,
    "apply": op_apply,
}


def main():
    try:
        request = json.load(sys.stdin)
        if not isinstance(request, dict) or request.get("version") != VERSION:
            raise refused(f"this plugin speaks protocol version {VERSION} only")
        op = OPS.get(request.get("op"))
        if op is None:
            raise PluginError("unsupported", f"do {request.get('op')!r}")
        with state() as data:
            answer, code = op(request, data), 0
    except PluginError as e:
        answer, code = {"error": {"class": e.cls, "message": str(e)}}, 1
    except (ValueError, KeyError, OSError) as e:
        answer, code = {"error": {"class": "refused", "message": f"{type(e).__name__}: {e}"}}, 1
    json.dump(answer, sys.stdout)
    sys.stdout.write("\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
