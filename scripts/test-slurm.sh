#!/usr/bin/env bash
# Runs a program under a real SLURM on this machine: starts a one-node cluster (slurmctld and
# slurmd on localhost, a generated slurm.conf with 2 CPUs, no munge: auth/none), runs
#
#   srun --ntasks=2 --mpi=pmix PROGRAM [ARGS...]
#
# and stops the daemons again. With `--requeue SECONDS` first, it submits the same srun as a
# batch job with a one-minute time limit that SLURM signals SECONDS before it ends
# (`sbatch --time=1 --signal=USR1@SECONDS`), raises the limit to ten minutes once the job has
# been requeued (so the run it resumes is signalled once, and is not started over and over:
# each start is a chance for srun's step launch to fail under load), waits until the job has
# ended, and prints the job's output, then `requeued N times` and its final state. With
# `--until PATTERN` after SECONDS (a glob without spaces, relative to the current directory),
# the job ends at the first file matching PATTERN that the requeued start writes: the script
# stops the job's step then (SIGTERM) and prints `reached FILE`, so that a long run is
# signalled, requeued and resumed without training to its end. The job's script also launches
# the step again (at most 4 times in one start) when it ends before that: under load, srun can
# fail to launch a step, or a step can end without having run, and the job would end there.
# The job's state over time goes to stderr when it did not complete.
# Needs root and Debian's slurm-wlm (scripts/setup.sh installs it). Exits 77 (skip) when the
# cluster cannot start; otherwise with srun's status (with --requeue: 0 when the job completed).
set -euo pipefail

requeue= until=
if [ "${1:-}" = --requeue ]; then
    requeue=$2
    shift 2
    if [ "${1:-}" = --until ]; then
        until=$2
        shift 2
    fi
fi

for cmd in slurmctld slurmd srun sinfo; do
    command -v "$cmd" >/dev/null || { echo "skipped: $cmd is not installed (slurm-wlm)" >&2; exit 77; }
done
if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: a private SLURM cluster needs root here" >&2
    exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-slurm.XXXXXX")
host=$(hostname -s)
base=$((20000 + $$ % 20000))
pids=()
cleanup() {
    # Jobs first, while the daemons are there to end them: a slurmstepd killed instead leaves
    # its tasks running and its files behind.
    if [ -n "${pids[0]:-}" ] && kill -0 "${pids[0]}" 2>/dev/null; then
        timeout 10 scancel --quiet --full "--user=$(id -un)" 2>/dev/null || true
        for _ in $(seq 100); do
            pgrep -x slurmstepd >/dev/null || break
            sleep 0.1
        done
    fi
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    # A slurmstepd can outlive its slurmd (and ignore SIGTERM then); this machine runs no
    # other SLURM.
    pkill -9 -x slurmstepd 2>/dev/null || true
    # slurmd sometimes ignores SIGTERM once slurmctld is gone: give each daemon 5 s, then kill.
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT

mkdir -p "$dir/state" "$dir/spool" "$dir/tmp"
cat >"$dir/slurm.conf" <<CONF
ClusterName=ember
SlurmctldHost=$host
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/none
# A requeued job waits this long (and a step credential lives this long): 10 s, not 120.
AuthInfo=cred_expire=10
# Pending jobs are looked at every 5 s (not 60): a requeued job starts soon after it may.
SchedulerParameters=sched_interval=5
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=$host CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF="$dir/slurm.conf"

slurmctld -D -i >"$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D >"$dir/slurmd.out" 2>&1 &
pids+=($!)

# Wait (at most 30 s) for the node to be ready.
for _ in $(seq 60); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.5
done
if [ "${state:-}" != idle ]; then
    echo "skipped: the SLURM node did not become idle (state: ${state:-none})" >&2
    tail -n 5 "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/*.out >&2 2>/dev/null || true
    exit 77
fi

if [ -z "$requeue" ]; then
    srun --ntasks=2 --mpi=pmix --time=5 "$@"
    exit
fi

# The signal may come up to a minute earlier than SECONDS before the limit (sbatch(1)): SLURM
# 22.05 looks at time limits every 30 s and, with SECONDS of 20, signalled each start 10 to 40 s
# after it began (a requeued job starts afresh). A signal that comes before the program has
# started training ends it (no handler is installed yet): SECONDS of 20 leaves it 10 s.
# The job's script: the step, launched again until a requeued start has written a file that
# matches --until (a requeue the program asks for ends this script during the pause before a
# relaunch). The loop below touches $dir/requeued when it sees the requeue.
step="srun --mpi=pmix $(printf '%q ' "$@")"
if [ -n "$until" ]; then
    # sbatch --wrap runs sh: the glob is tested with a for loop (PATTERN holds no spaces), a
    # file's age against the requeue's mark (dash's test has -nt).
    step="for n in 1 2 3 4; do
    $step; status=\$?
    for f in $until; do [ -e $dir/requeued ] && [ \"\$f\" -nt $dir/requeued ] && exit 0; done
    echo \"test-slurm: the step ended with status \$status before a requeued start wrote $until (launch \$n of 4)\"
    sleep 3
done
exit 1"
fi
job=$(sbatch --parsable --ntasks=2 --time=1 --signal=USR1@"$requeue" --open-mode=append \
    --output="$dir/job.out" --wrap "$step")
lifted= reached=
for _ in $(seq 1200); do
    info=$(scontrol show job "$job")
    state=$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<<"$info")
    restarts=$(sed -n 's/.*Restarts=\([0-9]*\).*/\1/p' <<<"$info")
    if [ -z "$lifted" ] && [ "${restarts:-0}" -ge 1 ]; then
        scontrol update JobId="$job" TimeLimit=10 && lifted=1
        # What matches --until from now on, the requeued start wrote.
        touch "$dir/requeued"
    fi
    if [ -n "$lifted" ] && [ -n "$until" ] && [ -z "$reached" ]; then
        for f in $until; do
            if [ "$f" -nt "$dir/requeued" ]; then
                reached=$f
                # The step's tasks only (scancel sends other signals than KILL to no batch
                # script): the program stops, and the job's script sees the file and completes.
                scancel --quiet --signal=TERM "$job" || true
                break
            fi
        done
    fi
    echo "$(date +%T) $(grep -o 'JobState=[^ ]*\|Reason=[^ ]*\|Restarts=[^ ]*' <<<"$info" | tr '\n' ' ')" >>"$dir/trace"
    case "$state" in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
            # A requeue may still be on its way: an end is an end when it is still there 3 s later.
            sleep 3
            again=$(scontrol show job "$job" | grep -o 'JobState=[A-Z_]* \|Restarts=[0-9]*' | tr -d ' \n')
            [ "$again" = "JobState=${state}Restarts=$restarts" ] && break
            ;;
    esac
    sleep 0.5
done
cat "$dir/job.out"
[ -z "$reached" ] || echo "reached $reached"
restarts=$(scontrol show job "$job" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
echo "requeued ${restarts:-0} times"
echo "job $job ended: ${state:-unknown}"
if [ "$state" != COMPLETED ] || [ -n "${EMBER_SLURM_TRACE:-}" ]; then
    # Repeated lines folded: the state each time it changed.
    uniq -f 1 "$dir/trace" >&2
    tail -n 20 "$dir/slurmctld.log" >&2
fi
[ "$state" = COMPLETED ]
