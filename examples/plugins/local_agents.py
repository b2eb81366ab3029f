#!/usr/bin/env python3
"""A Corral provider plugin (exec protocol version 1) that runs `corral agent` processes on this
host, like the built-in `process` provider. Python 3 standard library only.

Configure a group with:
    {"name": "exec", "options": {"command": "/path/to/local_agents.py",
                                 "env": {"CORRAL_BINARY": "/usr/local/bin/corral"}}}

Environment:
    CORRAL_BINARY         the corral executable (default: `corral` on PATH)
    CORRAL_PLUGIN_STATE   where state, agent logs and work directories live
                          (default: ~/.local/state/corral-plugin)

Try it by hand:
    echo '{"version":1,"op":"list","group":"dev","manager_url":"http://127.0.0.1:8470",
           "templates":[]}' | ./local_agents.py

State: $CORRAL_PLUGIN_STATE/instances.json holds one entry per agent (pid, start time, group,
template), guarded by a lock file since the manager may call the plugin concurrently. Each agent
runs in a session of its own (so it survives this plugin's exit, and is stopped with all it
started), with
its output in $CORRAL_PLUGIN_STATE/<group>/<agent_id>/agent.log. The instance id is the agent id.
"""

import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time

VERSION = 1
STOP_GRACE_SECS = 5.0
TEMPLATE_LABEL = "corral.io/template"


class PluginError(Exception):
    """A failure with the class the manager acts on: capacity, transient or fatal."""

    def __init__(self, cls, message):
        super().__init__(message)
        self.cls = cls


def state_dir():
    default = os.path.join(os.path.expanduser("~"), ".local", "state", "corral-plugin")
    return os.environ.get("CORRAL_PLUGIN_STATE") or default


def corral_binary():
    configured = os.environ.get("CORRAL_BINARY")
    if configured:
        if not os.access(configured, os.X_OK):
            raise PluginError("fatal", f"CORRAL_BINARY={configured} is not an executable file")
        return configured
    found = shutil.which("corral")
    if not found:
        raise PluginError("fatal", "corral is not on PATH; set CORRAL_BINARY in the plugin's env")
    return found


# --- processes ------------------------------------------------------------------------------


def proc_stat(pid):
    """(state, process group, session, start time in clock ticks) from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold anything: count from the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[2]), int(fields[3]), int(fields[19])


def start_time(pid):
    """Field 22 of /proc/<pid>/stat for a live (not zombie) process, else None."""
    stat = proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return None
    return stat[3]


def alive(entry):
    return start_time(entry["pid"]) == entry["start_time"]


def session_groups(sid):
    """The process groups with a live (not zombie) member in session `sid`: the agent's own and
    those of the sessions it runs as processes."""
    groups = set()
    for name in os.listdir("/proc"):
        stat = proc_stat(int(name)) if name.isdigit() else None
        if stat and stat[2] == sid and stat[0] not in ("Z", "X"):
            groups.add(stat[1])
    return groups


def owns_session(entry):
    """Whether the agent's session is still its own: the leader is the recorded process (live or
    a zombie), or the leader is gone and processes of its session remain. A pid that names a
    session is not reused, so a leader with another start time means the pid is someone else's."""
    stat = proc_stat(entry["pid"])
    if stat is not None:
        return stat[3] == entry["start_time"]
    return bool(session_groups(entry["pid"]))


def stop_sessions(sids):
    """SIGTERM every process group of the agents' sessions, wait up to STOP_GRACE_SECS, then
    SIGKILL: all agents at once, so that stopping many takes no longer than stopping one."""

    def groups():
        return set().union(*(session_groups(s) for s in sids))

    def signal_all(sig):
        for pgid in groups():
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECS
    while groups() and time.monotonic() < deadline:
        time.sleep(0.05)
    deadline = time.monotonic() + 2.0
    while groups():
        if time.monotonic() > deadline:
            raise PluginError("transient", f"process groups {sorted(groups())} survived SIGKILL")
        signal_all(signal.SIGKILL)  # at each look: a process may have forked meanwhile
        time.sleep(0.05)


# --- state ----------------------------------------------------------------------------------


class State:
    """instances.json under an exclusive lock, saved atomically (temporary file + rename)."""

    def __init__(self, root):
        self.root = root
        self.path = os.path.join(root, "instances.json")

    def __enter__(self):
        os.makedirs(self.root, exist_ok=True)
        self.lock = open(os.path.join(self.root, "lock"), "w")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            with open(self.path) as f:
                self.instances = json.load(f)["instances"]
        except FileNotFoundError:
            self.instances = {}
        except (ValueError, KeyError) as e:
            raise PluginError("fatal", f"{self.path} is damaged: {e}")
        return self

    def save(self):
        tmp = f"{self.path}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"instances": self.instances}, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def __exit__(self, *exc):
        self.lock.close()


def key(group, agent_id):
    return f"{group}/{agent_id}"


def instance(entry):
    return {
        "id": entry["agent_id"],
        "agent_id": entry["agent_id"],
        "template": entry["template"],
        "state": "running" if alive(entry) else "gone",
    }


# --- operations -----------------------------------------------------------------------------


def op_templates(request):
    offers = []
    for t in request["templates"]:
        offer = {"name": t["name"], "slots": t["slots"]}
        if t.get("price_per_hour") is not None:
            offer["price_per_hour"] = t["price_per_hour"]
        offers.append(offer)
    return {"templates": offers}


def op_launch(request):
    group, server, name = request["group"], request["manager_url"], request["template"]
    template = next((t for t in request["templates"] if t["name"] == name), None)
    if template is None:
        raise PluginError("fatal", f"template {name!r} is not in group {group!r}")
    binary = corral_binary()
    launched = []
    with State(state_dir()) as state:
        for req in request["requests"]:
            try:
                entry = start_agent(binary, state.root, server, group, template, req)
            except PluginError:
                if not launched:
                    raise
                break  # A partial launch: the requests not answered count as failed.
            state.instances[key(group, req["agent_id"])] = entry
            state.save()
            launched.append(instance(entry) | {"state": "running"})
    return {"instances": launched}


def start_agent(binary, root, server, group, template, req):
    agent_id = req["agent_id"]
    agent_dir = os.path.join(root, group, agent_id)
    work_dir = os.path.join(agent_dir, "work")
    os.makedirs(work_dir, exist_ok=True)
    argv = [binary, "agent", "--server", server, "--group", group, "--id", agent_id]
    if template["slots"]:
        argv += ["--capacity", template["slots"]]
    argv += ["--label", f"{TEMPLATE_LABEL}={template['name']}", "--work-dir", work_dir]
    # The token goes in the environment: argv is readable by every user of the host.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["CORRAL_TOKEN"] = req["token"]
    try:
        with open(os.path.join(agent_dir, "agent.log"), "ab") as log:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own session: outlives us, stopped as a group
                close_fds=True,
            )
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.ENOMEM):
            raise PluginError("capacity", f"cannot start agent {agent_id}: {e.strerror}")
        if e.errno in (errno.ENOENT, errno.EACCES):
            raise PluginError("fatal", f"cannot run {binary}: {e.strerror}")
        raise PluginError("transient", f"starting agent {agent_id}: {e}")
    started = start_time(proc.pid)
    if started is None:
        raise PluginError("transient", f"agent {agent_id} exited at once (see its agent.log)")
    return {
        "pid": proc.pid,
        "start_time": started,
        "group": group,
        "agent_id": agent_id,
        "template": template["name"],
    }


def op_list(request):
    group = request["group"]
    with State(state_dir()) as state:
        entries = [e for e in state.instances.values() if e["group"] == group]
    return {"instances": [instance(e) for e in sorted(entries, key=lambda e: e["agent_id"])]}


def op_terminate(request):
    group = request["group"]
    with State(state_dir()) as state:
        # Ids we do not know are already gone: not an error.
        keys = [key(group, i) for i in request["ids"] if key(group, i) in state.instances]
        stop_sessions([state.instances[k]["pid"] for k in keys if owns_session(state.instances[k])])
        for k in keys:
            del state.instances[k]
        state.save()
    return {}


OPS = {"templates": op_templates, "launch": op_launch, "list": op_list, "terminate": op_terminate}


def handle(request):
    if not isinstance(request, dict) or request.get("version") != VERSION:
        raise PluginError("fatal", f"this plugin speaks protocol version {VERSION} only")
    op = OPS.get(request.get("op"))
    if op is None:
        raise PluginError("fatal", f"unknown op {request.get('op')!r}")
    return op(request)


def main():
    try:
        request = json.load(sys.stdin)
    except ValueError as e:
        response, code = {"error": {"class": "fatal", "message": f"bad request: {e}"}}, 1
    else:
        try:
            response, code = handle(request), 0
        except PluginError as e:
            response, code = {"error": {"class": e.cls, "message": str(e)}}, 1
        except KeyError as e:
            response, code = {"error": {"class": "fatal", "message": f"request lacks {e}"}}, 1
        except OSError as e:
            response, code = {"error": {"class": "transient", "message": str(e)}}, 1
    json.dump(response, sys.stdout)
    sys.stdout.write("\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
