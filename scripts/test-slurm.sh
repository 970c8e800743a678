#!/usr/bin/env bash
# A real single-node Slurm on this host: install it from Debian's packages if
# missing, start munge, slurmctld and slurmd directly (no systemd) with a
# configuration in a temporary folder, submit a tiny CPU matrix as a 4-task
# array through `tricklab slurm submit`, wait, merge the shards and check that
# every run is there exactly once. Then a two-node rehearsal: two more slurmd
# daemons, each in its own network and UTS namespace (nodes tl-n1 and tl-n2
# at 10.77.0.2 and .3 on a bridge), so `srun --nodes 2 tricklab train` runs
# one rank per node and the ranks meet across the nodes' addresses, not over
# a shared loopback. Cleans up after itself, also on failure.
#
# Usage (from the repository root, as root): bash scripts/test-slurm.sh [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(realpath "${1:-target/debug/tricklab}")"
[ -x "$BIN" ] || { echo "test-slurm: no binary at $BIN: build first" >&2; exit 1; }

if ! command -v sbatch >/dev/null || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "test-slurm: installing slurmctld, slurmd, slurm-client and munge"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
fi

D="$(mktemp -d /tmp/tricklab-slurm.XXXXXX)"
HOST="$(hostname -s)"
PIDS=()
NET=10.77.0
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if [ "${TWO_NODES:-0}" = 1 ]; then
    for n in 1 2; do ip netns del "tl-n$n" 2>/dev/null || true; done
    ip link del tl-br 2>/dev/null || true
    sed -i '/ tl-n[12] # tricklab test-slurm$/d' /etc/hosts
  fi
  if [ "${KEEP:-0}" != 1 ]; then rm -rf "$D"; else echo "test-slurm: kept $D"; fi
}
trap cleanup EXIT

# The two nodes: a bridge in this namespace (slurmctld's address on it is
# $NET.1) and a network namespace a node with a veth on the bridge, its
# default route back through it. Their names resolve through /etc/hosts, as
# a cluster's node names do through its DNS.
two_nodes_up() {
  ip link add tl-br type bridge || return 1
  ip addr add "$NET.1/24" dev tl-br || return 1
  ip link set tl-br up || return 1
  for n in 1 2; do
    ip netns add "tl-n$n" || return 1
    ip link add "tl-v$n" type veth peer name "tl-p$n" || return 1
    ip link set "tl-p$n" netns "tl-n$n" || return 1
    ip link set "tl-v$n" master tl-br || return 1
    ip link set "tl-v$n" up || return 1
    ip netns exec "tl-n$n" ip addr add "$NET.$((n + 1))/24" dev "tl-p$n" || return 1
    ip netns exec "tl-n$n" ip link set "tl-p$n" up || return 1
    ip netns exec "tl-n$n" ip link set lo up || return 1
    ip netns exec "tl-n$n" ip route add default via "$NET.1" || return 1
    echo "$NET.$((n + 1)) tl-n$n # tricklab test-slurm" >>/etc/hosts || return 1
  done
}
# Set before trying, so that cleanup undoes a half-made network too.
TWO_NODES=1
if ! two_nodes_up 2>"$D.err"; then
  echo "test-slurm: SKIPPING the two-node rehearsal: this host cannot make network namespaces ($(tr '\n' ' ' <"$D.err")); run as root on a kernel that can"
  for n in 1 2; do ip netns del "tl-n$n" 2>/dev/null || true; done
  ip link del tl-br 2>/dev/null || true
  sed -i '/ tl-n[12] # tricklab test-slurm$/d' /etc/hosts 2>/dev/null || true
  TWO_NODES=0
fi
rm -f "$D.err"

mkdir -p "$D/state" "$D/spool/$HOST" "$D/spool/tl-n1" "$D/spool/tl-n2" "$D/munge" "$D/results"
if [ "$TWO_NODES" = 1 ]; then
  CTLD="$HOST($NET.1)"
  PAIR="NodeName=tl-n[1-2] NodeAddr=$NET.[2-3] CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=pair Nodes=tl-n[1-2] MaxTime=INFINITE State=UP"
else
  CTLD="$HOST" PAIR=""
fi
cat >"$D/slurm.conf" <<EOF
ClusterName=tricklab-test
SlurmctldHost=$CTLD
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=${SLURMCTLD_PORT:-16817}
SlurmdPort=${SLURMD_PORT:-16818}
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=$HOST CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
$PAIR
EOF
export SLURM_CONF="$D/slurm.conf"

# munge with its own socket and key, so a system munged (if any) is left alone.
cp /etc/munge/munge.key "$D/munge/munge.key" 2>/dev/null \
  || dd if=/dev/urandom of="$D/munge/munge.key" bs=1 count=128 status=none
chmod 700 "$D/munge"; chmod 400 "$D/munge/munge.key"
SOCK="$D/munge/munge.socket"
munged --force --key-file="$D/munge/munge.key" --socket="$SOCK" \
  --pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" --seed-file="$D/munge/seed"
sleep 0.5
PIDS+=("$(cat "$D/munge/munged.pid")")
# Slurm's munge plugins take the socket from AuthInfo.
sed -i "s|^AuthType=auth/munge|AuthType=auth/munge\nAuthInfo=socket=$SOCK|" "$D/slurm.conf"

slurmctld -D -i -f "$D/slurm.conf" >>"$D/slurmctld.out" 2>&1 &
PIDS+=("$!")
slurmd -D -f "$D/slurm.conf" >>"$D/slurmd.out" 2>&1 &
PIDS+=("$!")
if [ "$TWO_NODES" = 1 ]; then
  for n in 1 2; do
    # Each node's slurmd (and so its job steps) in the node's network and
    # its own hostname, the one its ranks' Gloo resolves to bind on
    # (nsenter, not `ip netns exec`, which remounts /sys without its cgroups).
    nsenter --net="/var/run/netns/tl-n$n" unshare --uts sh -c "hostname tl-n$n && exec slurmd -D -N tl-n$n -f '$D/slurm.conf'" \
      >>"$D/slurmd-tl-n$n.out" 2>&1 &
    PIDS+=("$!")
  done
fi
for _ in $(seq 1 60); do
  state="$(sinfo -h -N -o %T 2>/dev/null | sort -u | tr '\n' ' ')"
  [ "$state" = "idle " ] && break
  sleep 0.5
done
[ "$state" = "idle " ] || { echo "test-slurm: the nodes never became idle ($state)"; for f in "$D"/slurm*.log "$D"/slurmd*.out; do echo "== $f"; tail -n 20 "$f"; done; exit 1; }

wait_job() {
  for _ in $(seq 1 240); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 0.5
  done
  echo "test-slurm: job $1 still queued after 120 s"; squeue; exit 1
}

t0=$(date +%s)
out="$("$BIN" slurm submit tests/fixtures/tiny.toml --shards 4 --gpus-per-task 0 --cpus-per-task 1 --time 10:00 --results "$D/results")"
echo "$out"
job="$(sed -n 's/^submitted job \([0-9]*\):.*/\1/p' <<<"$out")"
[ -n "$job" ] || { echo "test-slurm: no job id in: $out"; exit 1; }
wait_job "$job"
"$BIN" slurm status "$job" --results "$D/results"

jobdir="$(ls -d "$D"/results/tiny-test/slurm-*)"
# A task lost to pre-emption before it wrote anything: resubmit runs only it.
rm -rf "$jobdir/shard-3"
out="$("$BIN" slurm resubmit "$job" --results "$D/results")"
echo "$out"
again="$(sed -n 's/^re-submitted tasks 3 as job \([0-9]*\)$/\1/p' <<<"$out")"
[ -n "$again" ] || { echo "test-slurm: resubmit should send task 3 alone: $out"; exit 1; }
wait_job "$again"
"$BIN" slurm resubmit "$job" --results "$D/results" | grep -q "nothing to re-submit" \
  || { echo "test-slurm: a second resubmit should find every shard complete"; exit 1; }
shards=("$jobdir"/shard-*/*/*)
[ "${#shards[@]}" = 4 ] || { echo "test-slurm: ${#shards[@]} shard folders, want 4"; cat "$jobdir"/logs/*; exit 1; }
merged="$("$BIN" merge "${shards[@]}" --into "$jobdir/merged")"
echo "$merged"
grep -q "(4 runs, 0 duplicates, 0 missing)" <<<"$merged" || { echo "test-slurm: merge is not every run exactly once"; exit 1; }
"$BIN" report "$jobdir/merged" --format csv | grep -q '"tiny-test",1,"+ label smoothing",dawn,2,0' \
  || { echo "test-slurm: the merged report lacks a variant's 2 runs"; exit 1; }
# The same table as one worker with the tasks' one thread (CPU runs are deterministic).
"$BIN" run tests/fixtures/tiny.toml --headless --devices cpu --cpu-threads 1 --results "$D/single" >/dev/null 2>&1
# Column 7 (noisy) is the machine's, not the numbers': four tasks at once on a
# small node are rightly flagged noisy where one worker's runs are not.
numbers() { "$BIN" report "$1" --format csv | cut -d, -f1-6,8-11; }
[ "$(numbers "$jobdir/merged")" = "$(numbers "$D/single/tiny-test")" ] \
  || { echo "test-slurm: the merged table differs from one worker's:"; numbers "$jobdir/merged"; numbers "$D/single/tiny-test"; exit 1; }
# A script matrix as an array: each task runs its share of a user's own
# script (standard library only, the tricklab module on its path), and the
# shards merge into one folder whose every run is there once.
mkdir -p "$D/script"
cat >"$D/script/planted.py" <<'PY'
import sys
import tricklab
fast = "--fast" in sys.argv
tricklab.log(step=1, loss=1.0, lr=0.1)
tricklab.final(acc=0.8, seconds=5.0 - 2.0 * fast)
PY
cat >"$D/script/ladder.toml" <<'TOML'
name = "script-array"
kind = "ladder"
repeats = 2
target = 0.5
[script]
command = ["python3", "planted.py", "--seed", "{seed}"]
[tricks.fast]
args = ["--fast"]
[[rung]]
name = "base"
[[rung]]
name = "fast"
on = ["fast"]
TOML
out="$("$BIN" slurm submit "$D/script/ladder.toml" --shards 2 --gpus-per-task 0 --cpus-per-task 1 --time 10:00 --results "$D/results")"
sjob="$(sed -n 's/^submitted job \([0-9]*\):.*/\1/p' <<<"$out")"
[ -n "$sjob" ] || { echo "test-slurm: no job id in: $out"; exit 1; }
wait_job "$sjob"
sdir="$(ls -d "$D"/results/script-array/slurm-*)"
sshards=("$sdir"/shard-*/*/*)
[ "${#sshards[@]}" = 2 ] || { echo "test-slurm: ${#sshards[@]} script shard folders, want 2"; cat "$sdir"/logs/*; exit 1; }
merged="$("$BIN" merge "${sshards[@]}" --into "$sdir/merged")"
grep -q "(4 runs, 0 duplicates, 0 missing)" <<<"$merged" || { echo "test-slurm: the script shards do not merge into every run once: $merged"; cat "$sdir"/logs/*; exit 1; }
"$BIN" report "$sdir/merged" --format csv | grep -q '"script-array",1,"fast",hlb,2,0' \
  || { echo "test-slurm: the merged script report lacks a rung's 2 runs:"; "$BIN" report "$sdir/merged" --format csv; exit 1; }
echo "test-slurm: a script matrix as a 2-task array, merged: every run once"

# One run over two ranks: the array task holds 2 Slurm tasks and its session
# starts the ranks with srun (SLURM_PROCID/NTASKS/LOCALID, the node list's first host).
out="$("$BIN" slurm submit tests/fixtures/tiny-gang.toml --shards 1 --gpus-per-task 0 --cpus-per-task 1 --time 10:00 --results "$D/results")"
echo "$out"
gjob="$(sed -n 's/^submitted job \([0-9]*\):.*/\1/p' <<<"$out")"
[ -n "$gjob" ] || { echo "test-slurm: no job id in: $out"; exit 1; }
wait_job "$gjob"
gdir="$(ls -d "$D"/results/tiny-gang/slurm-*/shard-1/*/*)"
"$BIN" report "$gdir" --format csv | grep -q '"tiny-gang",0,"two ranks",dawn,1,0' \
  || { echo "test-slurm: the 2-rank run did not finish:"; cat "$D"/results/tiny-gang/slurm-*/logs/*; exit 1; }
grep -q 'cpu ×2 (srun)' "$gdir/manifest.json" \
  || { echo "test-slurm: the run was not trained by 2 srun ranks:"; grep -A2 '"devices"' "$gdir/manifest.json"; exit 1; }
echo "test-slurm: one 2-rank run as 2 srun tasks"

# `tricklab train` started by srun itself, as users start distributed jobs:
# one run over the 2 tasks, rank 0 reporting it.
out="$(timeout 300 srun --ntasks 2 --cpus-per-task 1 "$BIN" train --recipe tiny-page-resnet9 \
  --data synthetic:64 --set epochs=1 --set batch_size=16 --device cpu --no-warm-up 2>&1)" \
  || { echo "test-slurm: srun tricklab train failed:"; echo "$out"; exit 1; }
grep -q "world size 2 (srun)" <<<"$out" || { echo "test-slurm: train did not say its 2 srun ranks:"; echo "$out"; exit 1; }
[ "$(grep -c '^accuracy ' <<<"$out")" = 1 ] || { echo "test-slurm: rank 0 alone should report:"; echo "$out"; exit 1; }
echo "test-slurm: srun --ntasks 2 tricklab train, one run over both tasks"

# A rank killed under srun: the run fails naming it, the next run trains.
cat >"$D/gang-kill.toml" <<'TOML'
name = "gang-kill"
recipe = "tiny-page-resnet9"
kind = "list"
data = "synthetic:400"
repeats = 1
set = { batch_size = 64, world_size = 2 }
[[variant]]
name = "long"
set = { epochs = 9999 }
[[variant]]
name = "short"
set = { epochs = 1 }
TOML
out="$("$BIN" slurm submit "$D/gang-kill.toml" --shards 1 --gpus-per-task 0 --cpus-per-task 1 --time 10:00 --results "$D/results")"
kjob="$(sed -n 's/^submitted job \([0-9]*\):.*/\1/p' <<<"$out")"
victim=""
for _ in $(seq 1 120); do
  for p in $(pgrep -f "tricklab rank" || true); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx SLURM_PROCID=1 \
      && tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -q '"long"'; then victim=$p; fi
  done
  [ -n "$victim" ] && break
  sleep 0.5
done
[ -n "$victim" ] || { echo "test-slurm: rank 1 of the long run never started"; cat "$D"/results/gang-kill/slurm-*/logs/*; exit 1; }
sleep 3
kill -9 "$victim"
wait_job "$kjob"
klog="$(cat "$D"/results/gang-kill/slurm-*/logs/*)"
grep -q "FAILED gang-kill/long#0: rank 1 of 2 (srun task 1)" <<<"$klog" \
  || { echo "test-slurm: the killed rank is not named:"; echo "$klog" | grep -v '^|'; exit 1; }
grep -q "^done  gang-kill/short#0" <<<"$klog" || { echo "test-slurm: the next run did not train:"; echo "$klog" | grep -v '^|'; exit 1; }
pgrep -f "tricklab rank" >/dev/null && { echo "test-slurm: a rank was left behind"; exit 1; }
echo "test-slurm: a rank killed under srun fails its run by name, the next run trains, no rank left"

# Two nodes, one rank each: `tricklab train` under srun --nodes 2 is one run,
# its ranks meeting at tl-n1's address from two network namespaces.
if [ "$TWO_NODES" = 1 ]; then
  out="$(timeout 300 srun -p pair --nodes 2 --ntasks-per-node 1 --cpus-per-task 1 "$BIN" train --recipe tiny-page-resnet9 \
    --data synthetic:64 --set epochs=1 --set batch_size=16 --device cpu --no-warm-up 2>&1)" \
    || { echo "test-slurm: srun --nodes 2 tricklab train failed:"; echo "$out"; tail -5 "$D"/slurmd-tl-n*.log; exit 1; }
  grep -q "^2 ranks on 2 hosts: tl-n1 (rank 0), tl-n2 (rank 1)$" <<<"$out" \
    || { echo "test-slurm: the ranks were not on the two nodes:"; echo "$out"; exit 1; }
  grep -q "world size 2 (srun)" <<<"$out" && [ "$(grep -c '^accuracy ' <<<"$out")" = 1 ] \
    || { echo "test-slurm: the two-node run did not train as one run:"; echo "$out"; exit 1; }
  echo "test-slurm: srun --nodes 2 tricklab train, one rank on each of two nodes ($(grep '^2 ranks' <<<"$out"))"
  # A rank stopped on the other node: its peer cannot read that node's process
  # states, so it names the rank that never marked itself timed out in the store.
  # 20 s: the ranks' rendezvous across the nodes takes more than 6.
  TRICKLAB_DIST_TIMEOUT=20 timeout 300 srun -p pair --nodes 2 --ntasks-per-node 1 --cpus-per-task 1 "$BIN" train \
    --recipe tiny-page-resnet9 --data synthetic:200 --set epochs=9999 --set batch_size=16 --device cpu \
    --no-warm-up >"$D/stopped.out" 2>&1 &
  spid=$!
  victim=""
  for _ in $(seq 1 120); do
    for p in $(pgrep -f "tricklab train" || true); do
      if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx SLURM_PROCID=1; then victim=$p; fi
    done
    [ -n "$victim" ] && grep -q "^2 ranks on 2 hosts" "$D/stopped.out" && break
    sleep 0.5
  done
  [ -n "$victim" ] || { echo "test-slurm: rank 1 of the stopped run never started"; cat "$D/stopped.out"; kill "$spid" 2>/dev/null; exit 1; }
  sleep 3
  kill -STOP "$victim"
  for _ in $(seq 1 90); do grep -q "did not answer" "$D/stopped.out" && break; sleep 0.5; done
  kill -9 "$victim" 2>/dev/null || true
  wait "$spid" || true
  grep -q "rank 1 of 2 (tl-n2, pid $victim) did not answer: rank 0 timed out waiting after 20 s" "$D/stopped.out" \
    || { echo "test-slurm: the rank stopped on tl-n2 is not named:"; cat "$D/stopped.out"; exit 1; }
  echo "test-slurm: a rank stopped on the other node is named by its peer through the store"
  # The queue's own gang over the two nodes: an array task of 2 tasks on 2
  # nodes, its session starting the ranks with srun from tl-n1.
  out="$("$BIN" slurm submit tests/fixtures/tiny-gang.toml --nodes 2 --partition pair --shards 1 --gpus-per-task 0 \
    --cpus-per-task 1 --time 10:00 --results "$D/two")"
  njob="$(sed -n 's/^submitted job \([0-9]*\):.*/\1/p' <<<"$out")"
  [ -n "$njob" ] || { echo "test-slurm: no job id in: $out"; exit 1; }
  wait_job "$njob"
  nlog="$(cat "$D"/two/tiny-gang/slurm-*/logs/*)"
  ndir="$(ls -d "$D"/two/tiny-gang/slurm-*/shard-1/*/*)"
  "$BIN" report "$ndir" --format csv | grep -q '"tiny-gang",0,"two ranks",dawn,1,0' \
    || { echo "test-slurm: the two-node gang did not finish:"; echo "$nlog"; exit 1; }
  grep -q "cpu ×2 (srun on tl-n1, tl-n2)" "$ndir/manifest.json" \
    || { echo "test-slurm: the queue's gang was not on the two nodes:"; echo "$nlog" | grep -v '^|'; exit 1; }
  echo "test-slurm: slurm submit --nodes 2: the queue's 2-rank run, one rank on each node"
fi

echo "test-slurm: 4-task array on a real Slurm, one task re-submitted, merged, every run once, the table of one worker ($(( $(date +%s) - t0 )) s from submit to merge)"
