#!/usr/bin/env bash
# A single-host Slurm (Debian's 22.05) for the batch tests, without systemd: installs the
# packages when missing, writes /etc/slurm/slurm.conf, starts munged, slurmctld and slurmd,
# and waits until the node is idle; adds the account `corral-batch` that tests submit as.
# Idempotent; run as root. `.ci/slurm-stop.sh` stops it.
#
# The configuration is what the tests rely on: one node `localhost` advertising 8 CPUs and
# 4000 MB (more than this 2-core machine has, so that jobs run side by side), partition
# `debug`; EnforcePartLimits=ALL, so an impossible request is refused at submit instead of
# pending forever; finished jobs kept for an hour (MinJobAge); jobcomp/filetxt, so `sacct -c`
# still knows a job's exit code after slurmctld forgot it.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
fi

# The account the tests' jobs are submitted as (a binding's `run_as`): jobs must not run as the
# manager's user.
id corral-batch >/dev/null 2>&1 ||
  useradd --system --no-create-home --shell /usr/sbin/nologin corral-batch

[ -s /etc/munge/munge.key ] || { mungekey -c -f; chown munge:munge /etc/munge/munge.key; }
install -d -o munge -g munge -m 0755 /run/munge
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
munge -n | unmunge >/dev/null

install -d -o slurm -g slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
cat > /etc/slurm/slurm.conf <<'CONF'
ClusterName=corral
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/lib/slurm/slurmd
StateSaveLocation=/var/lib/slurm/slurmctld
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
MinJobAge=3600
MaxArraySize=1001
MaxJobCount=20000
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
JobAcctGatherType=jobacct_gather/none
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF

pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd -N localhost
for _ in $(seq 60); do
  state=$(sinfo -h -n localhost -o %t 2>/dev/null || true)
  case "$state" in
    idle|mix|alloc) exit 0 ;;
    drain*|down*) scontrol update NodeName=localhost State=RESUME 2>/dev/null || true ;;
  esac
  sleep 0.5
done
echo "slurm did not come up; its logs:" >&2
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2
exit 1
