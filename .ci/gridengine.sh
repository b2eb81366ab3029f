#!/usr/bin/env bash
# A single-host Grid Engine (Debian's Son of Grid Engine 8.1.9) for the batch tests, without
# systemd: installs the packages when missing, starts sge_qmaster and sge_execd, and configures
# what the tests rely on: root may run jobs (min_uid 0), the scheduler runs every second, and
# queue all.q has 4 slots on this host. Idempotent; run as root. `.ci/gridengine-stop.sh` stops it.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
host=$(hostname)

if ! command -v sge_qmaster >/dev/null && [ ! -x /usr/sbin/sge_qmaster ]; then
  apt-get update -qq
  debconf-set-selections <<SEL
gridengine-common shared/gridengineconfig boolean true
gridengine-common shared/gridenginecell string default
gridengine-common shared/gridenginemaster string $host
SEL
  apt-get install -y -qq gridengine-master gridengine-exec gridengine-client >/dev/null
fi

# The host name resolves to 127.0.0.1, which resolves back to "localhost": without an alias the
# master refuses the host's own clients ("client IP resolved to host name localhost").
echo "$host localhost" > $SGE_ROOT/$SGE_CELL/common/host_aliases
chown sgeadmin:sgeadmin $SGE_ROOT/$SGE_CELL/common/host_aliases
install -d -o sgeadmin -g sgeadmin /var/run/gridengine /var/spool/gridengine/execd
pgrep -x sge_qmaster >/dev/null || /usr/sbin/sge_qmaster
for _ in $(seq 60); do qconf -sm >/dev/null 2>&1 && break; sleep 0.5; done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The file must be named after the configuration it replaces ("global"). Root may run jobs,
qconf -sconf global > "$work/global"
# and accounting written every second (qacct lags 15 s otherwise).
sed -i 's/^min_uid .*/min_uid 0/; s/^min_gid .*/min_gid 0/; s/flush_time=[0-9:]*/flush_time=00:00:01/' "$work/global"
qconf -Mconf "$work/global" >/dev/null
qconf -ah "$host" >/dev/null 2>&1 || true
qconf -as "$host" >/dev/null 2>&1 || true
qconf -ssconf > "$work/sched"
sed -i 's/^schedule_interval .*/schedule_interval 0:0:1/; s/^flush_submit_sec .*/flush_submit_sec 1/; s/^flush_finish_sec .*/flush_finish_sec 1/' "$work/sched"
qconf -Msconf "$work/sched" >/dev/null
pgrep -x sge_execd >/dev/null || /usr/sbin/sge_execd
for _ in $(seq 60); do qconf -sel 2>/dev/null | grep -qx "$host" && break; sleep 0.5; done

if ! qconf -sq all.q >/dev/null 2>&1; then
  cat > "$work/all.q" <<QUEUE
qname all.q
hostlist $host
seq_no 0
load_thresholds NONE
suspend_thresholds NONE
nsuspend 1
suspend_interval 00:05:00
priority 0
min_cpu_interval 00:05:00
processors UNDEFINED
qtype BATCH INTERACTIVE
ckpt_list NONE
pe_list NONE
rerun FALSE
slots 4
tmpdir /tmp
shell /bin/sh
prolog NONE
epilog NONE
shell_start_mode posix_compliant
starter_method NONE
suspend_method NONE
resume_method NONE
terminate_method NONE
notify 00:00:60
owner_list NONE
user_lists NONE
xuser_lists NONE
subordinate_list NONE
complex_values NONE
projects NONE
xprojects NONE
calendar NONE
initial_state default
s_rt INFINITY
h_rt INFINITY
s_cpu INFINITY
h_cpu INFINITY
s_fsize INFINITY
h_fsize INFINITY
s_data INFINITY
h_data INFINITY
s_stack INFINITY
h_stack INFINITY
s_core INFINITY
h_core INFINITY
s_rss INFINITY
h_rss INFINITY
s_vmem INFINITY
h_vmem INFINITY
QUEUE
  qconf -Aq "$work/all.q" >/dev/null
fi
for _ in $(seq 60); do
  qstat -f -q all.q 2>/dev/null | grep -q "all.q@$host" && exit 0
  sleep 0.5
done
echo "grid engine did not come up" >&2
exit 1
