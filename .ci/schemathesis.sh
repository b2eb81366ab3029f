#!/usr/bin/env bash
# Schemathesis against a running manager's OpenAPI document, with every check on: any 5xx, any
# answer the document does not describe (status, content type, body schema), any schema-valid
# request refused or schema-invalid one accepted fails this script.
#
#   bash .ci/schemathesis.sh                 # what CI runs (a bounded number of examples)
#   EXAMPLES=200 bash .ci/schemathesis.sh    # a longer run (docs/security-checks.md)
#   OPENAPI_FILE=my-edit.json bash .ci/schemathesis.sh   # a file, not the document the
#                                            # binary serves (its checked-in openapi.json)
#
# It starts `target/debug/corral server` (under $CARGO_TARGET_DIR if set; built first) on a
# fresh data directory and a free
# loopback port, creates fixtures for the routes to find (a group with a template, an image, an
# agent, a session, a user token), runs schemathesis with the admin token, and stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
EXAMPLES=${EXAMPLES:-20}
SEED=${SEED:-20261202}

if [ "$(schemathesis --version 2>/dev/null)" != "schemathesis, version $SCHEMATHESIS_VERSION" ]; then
  python3 -m pip install -q "schemathesis==$SCHEMATHESIS_VERSION"
fi
# The `corral` binary the test command built (`--no-run`: nothing to do after it); `cargo build
# -p corral-cli` would build every dependency again with the CLI's features alone. BUILT=1: the
# caller built it (.ci/run, which runs this beside the tests: a second cargo would wait for the
# test command's lock until the tests end).
[ -n "${BUILT:-}" ] || cargo test --workspace --locked --no-run

work=$(mktemp -d /tmp/corral-schemathesis.XXXXXX)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Providers the tests configure must reach nothing off this machine: no cloud metadata service,
# no default endpoint, no kubeconfig, no Docker daemon (the hooks below also point every
# endpoint, host and program a request names at loopback or at nothing).
env -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT -u DOCKER_HOST \
  HOME="$work" KUBECONFIG="$work/no-kubeconfig" AWS_EC2_METADATA_DISABLED=true \
  AWS_CONFIG_FILE="$work/no-aws-config" AWS_SHARED_CREDENTIALS_FILE="$work/no-aws-credentials" \
  AWS_ACCESS_KEY_ID=schemathesis AWS_SECRET_ACCESS_KEY=schemathesis AWS_REGION=us-east-1 \
  AWS_ENDPOINT_URL=http://127.0.0.1:9 DOCKER_HOST="unix://$work/no-docker.sock" \
  RUST_LOG=${RUST_LOG:-warn} "${CARGO_TARGET_DIR:-target}/debug/corral" server --data-dir "$work/data" \
  --listen "127.0.0.1:$port" --tick-secs 0.2 --heartbeat-secs 1 --lost-after-secs 3600 \
  >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  curl -fsS "$base/api/v1/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; exit 1; }
  sleep 0.1
done
admin=$(cat "$work/data/admin.token")

# Fixtures: what the hooks below point schema-valid requests at.
call() { # METHOD PATH [BODY]: fails on any status >= 400
  curl -fsS -X "$1" -H "Authorization: Bearer $admin" -H 'content-type: application/json' \
    "$base$2" ${3:+--data "$3"}
}
call POST /api/v1/groups \
  '{"name": "fx", "templates": [{"name": "fx-small", "slots": "cpu=4,mem=8GiB", "max": 2}]}' >/dev/null
call POST /api/v1/groups '{"name": "fx2"}' >/dev/null
call PUT /api/v1/images/fx-image '{"min_slots": "cpu=1"}' >/dev/null
call PUT /api/v1/images/fx-image2 '{}' >/dev/null
call POST /api/v1/agents '{"id": "fx-agent", "group": "fx", "capacity": "cpu=64,mem=256GiB,gpu=8"}' >/dev/null
session=$(call POST /api/v1/sessions \
  '{"group": "fx", "command": ["true"], "request": "cpu=1", "inputs": ["in.txt"]}' |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
call POST /api/v1/tokens '{"user": "fx-user"}' >/dev/null
# The token these tests act with: never revoked by them.
admin_id=$(call GET /api/v1/tokens |
  python3 -c 'import json, sys; print([t["id"] for t in json.load(sys.stdin) if t["role"] == "admin"][0])')
# Once placed on fx-agent, the session gets its input, an output and a log.
for _ in $(seq 100); do
  call GET "/api/v1/sessions/$session" | grep -q '"state":"scheduled"' && break
  sleep 0.1
done
upload() { # METHOD PATH DATA
  curl -fsS -X "$1" -H "Authorization: Bearer $admin" -H 'content-type: application/octet-stream' \
    "$base$2" --data-binary "$3"
}
upload PUT "/api/v1/sessions/$session/inputs/in.txt" 'input'
upload PUT "/api/v1/agents/fx-agent/sessions/$session/outputs/out.txt" 'output'
upload POST "/api/v1/agents/fx-agent/sessions/$session/logs/stdout?offset=0" 'log line'

# Hooks: what JSON Schema cannot say. A schema-valid request may still name a group, image or
# template that does not exist, repeat a template or slot name, put min_nodes above max_nodes,
# or upload an input its session does not name; the server refuses those (400, as openapi.json's
# descriptions say). For positive cases only, the hooks point such references at the fixtures
# and make the cross-field rules hold, so that every schema-valid request must be accepted.
# In every case, providers are defused: endpoints and hosts point at loopback, programs at a
# path that does not exist (a valid value stays valid, an invalid one invalid).
cat >"$work/corral_hooks.py" <<EOF
import json
import re
import urllib.parse
import urllib.request

import schemathesis

SESSION = "$session"
ADMIN_ID = "$admin_id"
BASE = "$base"
ADMIN = "$admin"
SLOT_FIELDS = {"request", "capacity", "slots", "headroom", "min_slots"}


def positive(case):
    meta = case.meta
    return meta is not None and meta.generation.mode.is_positive


def pick(value, fixture):
    # Deterministic (hypothesis replays cases): about half the values become the fixture.
    return fixture if len(repr(value)) % 2 == 0 else value


def inputs_of(session):
    # What a session names as inputs (an upload must be one of them), or None.
    request = urllib.request.Request(f"{BASE}/api/v1/sessions/{urllib.parse.quote(session, safe='')}",
                                     headers={"Authorization": f"Bearer {ADMIN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response).get("inputs")
    except Exception:
        return None


def dedupe_slots(text):
    seen, parts = set(), []
    for part in text.split(","):
        name = part.split("=", 1)[0].strip()
        if "=" in part and name in seen:
            continue
        seen.add(name)
        parts.append(part)
    return ",".join(parts)


def fix_slots(value):
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in SLOT_FIELDS and isinstance(inner, str):
                value[key] = dedupe_slots(inner)
            else:
                fix_slots(inner)
    elif isinstance(value, list):
        for inner in value:
            fix_slots(inner)


def fix_templates(templates):
    if isinstance(templates, list):
        seen = set()
        for i, t in enumerate(templates):
            if isinstance(t, dict):
                # Device sets fill in the template's slots, which must agree where they say a
                # total: a rule across fields the schema cannot state (refused with 400).
                t.pop("devices", None)
            if isinstance(t, dict) and isinstance(t.get("name"), str):
                while t["name"] in seen:
                    t["name"] = (t["name"] + "x")[-64:] if len(t["name"]) < 64 else "t%d" % i
                seen.add(t["name"])


def fix_policy(policy):
    if isinstance(policy, dict):
        lo, hi = policy.get("min_nodes", 0), policy.get("max_nodes", 100)
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi:
            policy["min_nodes"] = hi
        # A target must be the version of an uploaded agent build (refused with 400 naming it).
        update = policy.get("agent_update")
        if isinstance(update, dict) and "target" in update:
            update["target"] = None


def defuse(provider):
    if not isinstance(provider, dict) or not isinstance(provider.get("options"), dict):
        return
    options = provider["options"]
    # Per-template settings must name templates of the group: a rule across fields the schema
    # cannot state (refused with 400, naming the entry).
    options.pop("templates", None)
    for key, safe in (("endpoint_url", "http://127.0.0.1:9"), ("api_server", "https://127.0.0.1:9"),
                      ("docker_host", "unix:///nonexistent/docker.sock"),
                      ("binary", "/nonexistent/corral")):
        if isinstance(options.get(key), str) and options[key] != "":
            valid = key == "binary" or re.match(r"^(https?://[^/]|unix://|tcp://|/)", options[key])
            if valid:
                options[key] = safe
    if provider.get("name") == "exec" and isinstance(options.get("command"), str) \
            and options["command"].startswith("/"):
        # An executable that exists (configuring a group checks it) and does nothing.
        options["command"] = "/bin/false"
    # Pilot jobs: every command (the scheduler's, and making a pilot's directory) runs as an
    # account that does not exist, so none runs; and no scheduler's command is found.
    batch = options.get("batch") if provider.get("name") == "batch" else None
    if isinstance(batch, dict) and isinstance(batch.get("options"), dict):
        batch["options"]["run_as"] = "corral-nobody"
        batch["options"].pop("run_as_manager", None)
        if batch.get("system") == "exec":
            batch["options"]["command"] = "/nonexistent/plugin"
        else:
            batch["options"]["bin_dir"] = "/nonexistent/bin"


def fix_provider(provider):
    if isinstance(provider, dict) and isinstance(provider.get("launch"), dict):
        launch = provider["launch"]
        lo, hi = launch.get("backoff_initial_secs", 10), launch.get("backoff_max_secs", 600)
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and hi < lo:
            launch["backoff_max_secs"] = lo


@schemathesis.hook
def before_call(ctx, case, kwargs):
    # The request as it will be sent (stateful links have filled it in); schemathesis checks
    # again afterwards whether the edited request is schema-valid.
    body = case.body if isinstance(case.body, dict) else None
    path, method = case.operation.path, case.method.upper()
    params = case.path_parameters if case.path_parameters is not None else {}
    if body is not None:
        defuse(body)
        defuse(body.get("provider"))
        # The long poll: never hold a sync for seconds.
        if path.endswith("/sync") and isinstance(body.get("wait_secs"), (int, float)):
            body["wait_secs"] = 0
    query = case.query if isinstance(case.query, dict) else None
    if query is not None and "wait_ms" in query:
        # Blocking reads: a few ms, never the seconds a valid wait may hold a request (a wait
        # beyond the maximum, or not a number, stays, to be refused).
        try:
            wait = float(query["wait_ms"])
        except (TypeError, ValueError):
            wait = None
        if wait is not None and 20 < wait <= 30000:
            query["wait_ms"] = 20
    if path == "/api/v1/groups/{name}/history" and query is not None and positive(case):
        # A window the pattern allows may still be empty or hold too many samples (since after
        # until, a step of 1 s over years): keep the start, as a duration before now, only.
        query.pop("until", None)
        query.pop("step", None)
        if not re.fullmatch(r"[1-9][0-9]{0,5}[smhd]", str(query.get("since", ""))):
            query["since"] = "6h"
    if path == "/api/v1/groups/{name}/batch":
        # Bindings go to fx2 and run no scheduler's command: fx stays unbound, so the job routes
        # answer from what they check (the body, the group, the binding) and reach no scheduler.
        if params.get("name") == "fx" or positive(case):
            params["name"] = "fx2"
        if body is not None and isinstance(body.get("options"), dict):
            body["options"]["bin_dir"] = "/nonexistent/bin"
            # Jobs run as an account of their own: a binding without one is refused (a rule
            # across fields, and the manager's account, that the schema cannot state).
            body["options"]["run_as"] = "corral-nobody"
            body["options"].pop("run_as_manager", None)
            # Nor do they take the group's sessions (whose submits would reach no scheduler).
            if "work_dir" in body["options"]:
                body["options"]["sessions"] = False
    if path.startswith("/api/v1/groups/{name}/batch/") and params.get("name") == "fx2":
        params["name"] = "fx"  # (links carry fx2 over from its binding)
    if path == "/api/v1/groups/{name}" and method == "DELETE" and params.get("name") in ("fx", "fx2"):
        params["name"] = "fx-no-group"  # The fixture groups stay: the hooks point cases at them.
    if path == "/api/v1/images/{name}" and method == "DELETE" and params.get("name") == "fx-image":
        params["name"] = "fx-image2"  # The image sessions name is never deleted.
    # The fixture agent and the tests' own token stay: removing either would end the run.
    if method == "DELETE" and path == "/api/v1/tokens/{id}" and params.get("id") == ADMIN_ID:
        params["id"] = "fx-no-token"
    if not positive(case):
        return
    if path.startswith("/api/v1/groups/{name}") and "name" in params and params["name"] != "fx2":
        params["name"] = pick(params["name"], "fx")
        if method == "DELETE" and path == "/api/v1/groups/{name}" and params["name"] == "fx":
            params["name"] = "fx-no-group"
    if path.startswith("/api/v1/images/{name}") and "name" in params:
        params["name"] = pick(params["name"], "fx-image" if method != "DELETE" else "fx-image2")
    if path.startswith("/api/v1/agents/{id}") and "id" in params:
        params["id"] = pick(params["id"], "fx-agent")
        if method == "DELETE" and path == "/api/v1/agents/{id}" and params["id"] == "fx-agent":
            # The fixture agent stays; an agent a stateful test registered may go.
            params["id"] = "fx-no-agent"
        if "session" in params and params["id"] == "fx-agent":
            params["session"] = SESSION
    if path.startswith("/api/v1/sessions/{id}") and "id" in params:
        params["id"] = pick(params["id"], SESSION)
    if path == "/api/v1/sessions/{id}/inputs/{path}" and params.get("id") != SESSION:
        names = inputs_of(str(params.get("id")))
        if names is not None:
            # Names a URL path carries as they are (the client leaves '#' and '?' unquoted).
            names = [n for n in names if not re.search(r"[#?%]", n)]
            if names:
                params["path"] = names[len(str(params.get("path"))) % len(names)]
            else:
                params["id"] = SESSION  # it takes no upload this test can name
    if params.get("id") == SESSION or params.get("session") == SESSION:
        if path.endswith("/inputs/{path}"):
            params["path"] = "in.txt"
        elif path.endswith("/outputs/{path}") and method == "GET":
            params["path"] = "out.txt"
    if body is None:
        if path == "/api/v1/groups/{name}/templates" and isinstance(case.body, list):
            fix_templates(case.body)
            fix_slots(case.body)
        return
    fix_slots(body)
    if path in ("/api/v1/sessions", "/api/v1/agents", "/api/v1/agents/join") and method == "POST":
        body["group"] = "fx"
    if path == "/api/v1/sessions" and method == "POST":
        # About half ask for what fx-agent has (the others are refused with 422 or queue).
        body["request"] = pick(body.get("request"), "cpu=1")
        # A device constraint needs a request of its kind beside it, once per kind: a rule
        # across fields the schema cannot state (refused with 400, naming it).
        body.pop("constraints", None)
        # An array's range must run upwards (a rule across fields, refused with 400 naming
        # \`array\`); a few sessions each, not the million a schema-valid range may ask for.
        array = body.get("array")
        # (Integers may come as floats such as 41761.0, in the stateful phase.)
        number = (int, float)
        if isinstance(array, dict) and isinstance(array.get("first"), number) \
                and isinstance(array.get("last"), number):
            first, last = sorted((int(array["first"]), int(array["last"])))
            array["first"], array["last"] = first, min(last, first + 9)
        environment = body.get("environment")
        if isinstance(environment, dict):
            # Set by Corral in an array's sessions (refused with 400 naming it).
            environment.pop("CORRAL_ARRAY_ID", None)
            environment.pop("CORRAL_ARRAY_INDEX", None)
    if path == "/api/v1/groups/{name}/required" and method == "POST":
        body.pop("constraints", None)  # as for POST /sessions
    if path in ("/api/v1/agents", "/api/v1/agents/join") and method == "POST":
        # A device list must add up to the capacity of its kinds, ids once each: rules across
        # fields the schema cannot state (refused with 400, naming them).
        body.pop("devices", None)
    if path == "/api/v1/agents/external/challenge" and method == "POST":
        body["group"] = "fx"
    if path == "/api/v1/agents/external/join" and isinstance(body.get("agent"), dict):
        body["agent"]["group"] = "fx"
        body["agent"].pop("devices", None)  # as for POST /agents/join
        fix_slots(body["agent"])
    if isinstance(body.get("image"), str):
        body["image"] = "fx-image"
    if path == "/api/v1/agents" and isinstance(body.get("template"), str):
        # The fixture group's templates change under the tests: name none.
        body["template"] = None
    if path.startswith("/api/v1/groups"):
        fix_templates(body.get("templates"))
        fix_policy(body.get("policy"))
        fix_provider(body.get("provider"))
        if path == "/api/v1/groups/{name}/provider":
            fix_provider(body)
        if method == "PUT" and path == "/api/v1/groups/{name}":
            body["name"] = params.get("name", body.get("name"))
        if method == "PATCH" and path == "/api/v1/groups/{name}":
            # A merge patch of the group's current settings: its name, if given, is the URL's;
            # the provider is left out (schema-valid options need not fit the stored provider);
            # bounds it gives are made to hold whatever the stored policy says.
            if "name" in body:
                body["name"] = params.get("name", body["name"])
            body.pop("provider", None)
            policy = body.get("policy")
            if isinstance(policy, dict) and ("min_nodes" in policy or "max_nodes" in policy):
                lo = policy.get("min_nodes") if isinstance(policy.get("min_nodes"), int) else 0
                hi = policy.get("max_nodes") if isinstance(policy.get("max_nodes"), int) else 100
                policy["min_nodes"], policy["max_nodes"] = min(lo, hi), hi
EOF

# Per operation: what the schema cannot promise. POST /sessions answers 422 for a request the
# group can never hold (admission, by design); the agent join answers 409 for an id another
# group holds (in the default list already). A job description and a batch binding have rules
# across fields (one of executable and script; an array's range; options only some systems
# take) that the server answers with 400, naming the field; a group bound to no batch system
# answers its job routes 409, and a scheduler refuses a job with 422.
cat >"$work/schemathesis.toml" <<'EOF'
# One operation each (`include-name`: the include-* filters of one entry match any of them).
[[operations]]
include-name = "POST /api/v1/sessions"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]

# An empty build is refused (400); another file under a version held is refused (409).
[[operations]]
include-name = "PUT /api/v1/agent-builds/{version}/{platform}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "409"]

# A password sent back redacted keeps the one set before: without one it is refused (400).
[[operations]]
include-name = "PUT /api/v1/groups/{name}/registry-logins/{registry}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404"]

[[operations]]
include-name = "POST /api/v1/groups/{name}/batch/jobs"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "422"]

[[operations]]
include-name = "DELETE /api/v1/tokens/{id}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409"]

[[operations]]
include-name = "DELETE /api/v1/agents/{id}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409"]

[[operations]]
include-name = "PUT /api/v1/groups/{name}/batch"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404"]

# A group is created without a batch binding: its binding is a 404 until one is PUT, which
# schemathesis, linking POST /groups to this path by the name, takes for a group not found.
[[operations]]
include-name = "GET /api/v1/groups/{name}/batch"
checks.ensure_resource_availability.enabled = false
EOF

# One worker: with two, hypothesis's lambda-source cache races ("FlakyFailure ... KeyError").
echo "== schemathesis $SCHEMATHESIS_VERSION: $EXAMPLES examples per operation, seed $SEED"
status=0
if [ -n "${OPENAPI_FILE:-}" ]; then
  schema=("$(realpath "$OPENAPI_FILE")" --url "$base")
else
  schema=("$base/api/v1/openapi.json")
fi
(cd "$work" && PYTHONPATH="$work" SCHEMATHESIS_HOOKS=corral_hooks schemathesis \
  --config-file "$work/schemathesis.toml" --no-color run "${schema[@]}" \
  --checks all --max-examples "$EXAMPLES" --seed "$SEED" --workers 1 \
  --header "Authorization: Bearer $admin" --request-timeout 10 \
  --suppress-health-check all) 2>&1 | tee "$work/schemathesis.out" || status=$?
if [ "$status" -ne 0 ]; then
  echo "== the manager's log (warnings and errors, the last 30)"
  tail -n 30 "$work/server.log"
  # Last, so that a caller showing the end of this output shows what failed.
  echo "== what schemathesis found"
  sed -n '/FAILURES/,$p' "$work/schemathesis.out" | head -n 200
fi
exit "$status"
