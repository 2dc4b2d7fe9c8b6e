#!/usr/bin/env bash
# `launch` over ssh to another host: the project's own test host, a network
# namespace with a veth pair and an sshd from Debian's openssh-server, made
# and removed here. Server 1 and worker 0 run "there" (reachable only at the
# namespace's address), the scheduler, server 0 and worker 1 here.
#   1. the run trains to its end, exit 0, with the summary and every log;
#   2. a launcher killed with SIGKILL mid-run leaves no process behind on the
#      other host (its ssh sessions end, the remote side stops the programs);
#   3. with cluster.on_worker_failure = "continue", the link to the other host
#      cut (ip link set down) past heartbeat_timeout_ms while worker 1 trains
#      there (the servers and worker 0, which evaluates, here): the job goes
#      on without it and exits 0; the link back, worker 1 exits on its own,
#      with its reason in its log (told it was dropped, or the scheduler
#      silent), and its exit is reported as the dropped worker's.
# Skipped (exit 77, reason printed) where the machine cannot make the host:
# not root, no `ip netns`, no sshd.
#   tests/integration/ssh_hosts_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin="${1:?BIN_DIR}"
src="${2:?SOURCE_DIR}"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "not root: cannot make a network namespace"
command -v ip >/dev/null || skip "no ip (iproute2)"
[ -x /usr/sbin/sshd ] || skip "no /usr/sbin/sshd (openssh-server)"
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || skip "no ssh client"

id=$(( $$ % 200 + 20 ))
ns="pstrain-ssh-$$"
here_if="pss${$}a"; there_if="pss${$}b"
here="10.231.$id.1"; there="10.231.$id.2"
tmp=$(mktemp -d /tmp/pstrain-ssh-XXXXXX)
launch_pid=""
cleanup() {
  set +e
  [ -n "$launch_pid" ] && kill -9 "$launch_pid" 2>/dev/null
  [ -f "$tmp/sshd.pid" ] && kill "$(cat "$tmp/sshd.pid")" 2>/dev/null
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
  ip link del "$here_if" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$ns" 2>"$tmp/err" || skip "ip netns add failed: $(cat "$tmp/err")"
ip link add "$here_if" type veth peer name "$there_if" 2>"$tmp/err" || skip "no veth: $(cat "$tmp/err")"
ip link set "$there_if" netns "$ns"
ip addr add "$here/24" dev "$here_if"
ip link set "$here_if" up
ip netns exec "$ns" ip addr add "$there/24" dev "$there_if"
ip netns exec "$ns" ip link set "$there_if" up
ip netns exec "$ns" ip link set lo up

ssh-keygen -q -t ed25519 -N '' -f "$tmp/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/id"
cp "$tmp/id.pub" "$tmp/authorized_keys"
cat > "$tmp/sshd_config" <<CFG
Port 2222
ListenAddress $there
HostKey $tmp/host_key
PidFile $tmp/sshd.pid
AuthorizedKeysFile $tmp/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
AcceptEnv none
CFG
mkdir -p /run/sshd
ip netns exec "$ns" /usr/sbin/sshd -f "$tmp/sshd_config" -E "$tmp/sshd.log" || skip "sshd did not start: $(cat "$tmp/sshd.log")"
ssh_cmd="ssh -F /dev/null -i $tmp/id -p 2222 -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5"
for _ in $(seq 50); do
  $ssh_cmd "$there" true 2>/dev/null && break
  sleep 0.2
done
$ssh_cmd "$there" true || fail "cannot ssh to the test host $there: $(cat "$tmp/sshd.log")"
# The other host is really elsewhere: its address is not one of ours.
ip -o addr | grep -q " $there/" && fail "$there is an address of this namespace"

hosts=(--set "cluster.scheduler=\"tcp://$here:0\""
       --set "cluster.server_hosts=[\"$here\", \"$there\"]"
       --set "cluster.worker_hosts=[\"$there\", \"$here\"]")

echo "--- 1. a run over two hosts"
run="$tmp/run"
status=0
"$bin/launch" --config "$src/configs/tiny_sync.toml" --run-dir "$run" --bin-dir "$bin" --ssh "$ssh_cmd" \
  --timeout-s 120 "${hosts[@]}" --set workload.epochs=1 >"$tmp/launch.txt" 2>&1 || status=$?
cat "$tmp/launch.txt"
[ "$status" = 0 ] || fail "launch exited $status"
[ -f "$run/summary.json" ] || fail "no summary.json"
grep -q "listening on tcp://$there:" "$run/logs/server-1.log" || fail "server 1 did not listen on $there"
grep -q "listening on tcp://$here:" "$run/logs/server-0.log" || fail "server 0 did not listen on $here"
for log in scheduler server-0 server-1 worker-0 worker-1; do
  [ -s "$run/logs/$log.log" ] || fail "empty logs/$log.log"
done
grep -q '"type":"end"' "$run/metrics/worker-0.jsonl" || fail "worker 0 (on $there) wrote no end record"
left=$(ip netns pids "$ns" | while read -r p; do [ "$(cat /proc/$p/comm 2>/dev/null)" = sshd ] || echo "$p"; done)
[ -z "$left" ] || fail "processes left on $there after the run: $left"

echo "--- 2. the launcher killed with SIGKILL mid-run"
run2="$tmp/run2"
"$bin/launch" --config "$src/configs/tiny_sync.toml" --run-dir "$run2" --bin-dir "$bin" --ssh "$ssh_cmd" \
  --timeout-s 120 "${hosts[@]}" --set workload.epochs=200 >"$tmp/launch2.txt" 2>&1 &
launch_pid=$!
for _ in $(seq 150); do
  [ -s "$run2/metrics/worker-0.jsonl" ] && break
  sleep 0.2
done
[ -s "$run2/metrics/worker-0.jsonl" ] || { cat "$tmp/launch2.txt"; fail "worker 0 on $there never started training"; }
running=$(ip netns pids "$ns" | while read -r p; do c=$(cat /proc/$p/comm 2>/dev/null); case "$c" in pstrain-*) echo "$c";; esac; done | sort | tr '\n' ' ')
[ "$running" = "pstrain-server pstrain-worker " ] || fail "expected a server and a worker on $there, saw: '$running'"
kill -9 "$launch_pid"
wait "$launch_pid" 2>/dev/null || true
launch_pid=""
gone=0
for _ in $(seq 100); do
  left=$(ip netns pids "$ns" | while read -r p; do c=$(cat /proc/$p/comm 2>/dev/null); case "$c" in pstrain-*) echo "$p";; esac; done)
  [ -z "$left" ] && { gone=1; break; }
  sleep 0.2
done
[ "$gone" = 1 ] || fail "pstrain processes left on $there 20 s after the launcher was killed: $left"
# Here they get their parent-death signal at once, but each still shuts down
# (a SIGTERM): give them the same 20 s as the other host's.
for _ in $(seq 100); do
  pgrep -f "pstrain-(scheduler|server|worker).*$run2" >/dev/null || break
  sleep 0.2
done
pgrep -f "pstrain-(scheduler|server|worker).*$run2" >/dev/null && fail "processes of the killed run left here 20 s after the launcher was killed"

echo "--- 3. the link to the other host cut mid-run (on_worker_failure = continue)"
run3="$tmp/run3"
hosts3=(--set "cluster.scheduler=\"tcp://$here:0\""
        --set "cluster.server_hosts=[\"$here\", \"$here\"]"
        --set "cluster.worker_hosts=[\"$here\", \"$there\"]")
"$bin/launch" --config "$src/configs/tiny_sync.toml" --run-dir "$run3" --bin-dir "$bin" --ssh "$ssh_cmd" \
  --timeout-s 120 "${hosts3[@]}" --set cluster.on_worker_failure=continue --set cluster.heartbeat_timeout_ms=1500 \
  --set workload.epochs=8 --set output.trace=off >"$tmp/launch3.txt" 2>&1 &
launch_pid=$!
steps() { grep -c '"type":"step"' "$1" 2>/dev/null || true; }
for _ in $(seq 300); do
  [ "$(steps "$run3/metrics/worker-1.jsonl")" -ge 3 ] && break
  sleep 0.1
done
[ "$(steps "$run3/metrics/worker-1.jsonl")" -ge 3 ] || { cat "$tmp/launch3.txt"; fail "worker 1 on $there never trained"; }
ip link set "$here_if" down
echo "link $here_if down after worker 1's step $(steps "$run3/metrics/worker-1.jsonl")"
dropped=0
for _ in $(seq 200); do  # 20 s
  grep -q "worker 1 .*dropped from the job" "$run3/logs/scheduler.log" 2>/dev/null && { dropped=1; break; }
  sleep 0.1
done
# Training goes on here meanwhile: worker 0 takes steps after the drop.
before=$(steps "$run3/metrics/worker-0.jsonl")
sleep 1
after=$(steps "$run3/metrics/worker-0.jsonl")
ip link set "$here_if" up
echo "link $here_if up again"
[ "$dropped" = 1 ] || { cat "$tmp/launch3.txt"; fail "the scheduler did not drop worker 1 within 20 s of the cut"; }
status=0
wait "$launch_pid" || status=$?
launch_pid=""
cat "$tmp/launch3.txt"
[ "$after" -gt "$before" ] || fail "worker 0 took no step in the second after the drop ($before -> $after)"
[ "$status" = 0 ] || fail "launch exited $status after the cut (expected 0: the job goes on without worker 1)"
grep -q "worker 1 .*the job goes on without it" "$tmp/launch3.txt" || fail "the launcher did not say worker 1's exit was let pass"
code=$(grep -o "worker 1 exited with code [0-9]*" "$tmp/launch3.txt" | grep -o "[0-9]*$" | head -1)
[ -n "$code" ] || fail "no exit code of worker 1 in the launcher's output"
[ "$code" != 0 ] || fail "worker 1 exited 0, as if it had trained to the end"
grep -Eq "was dropped from the job|sent nothing for .* ms" "$run3/logs/worker-1.log" ||
  fail "worker 1's log does not say why it stopped: $(tail -3 "$run3/logs/worker-1.log")"
echo "worker 1 exited with code $code: $(grep -Eo "(was dropped from the job|the scheduler at [^ ]* sent nothing for [0-9]* ms)" "$run3/logs/worker-1.log" | head -1)"
grep -q '"dropped_workers": \[1\]' "$run3/summary.json" || fail "the summary does not list worker 1 as dropped"
grep -q '"type":"end"' "$run3/metrics/worker-0.jsonl" || fail "worker 0 did not train to the end"
left=$(ip netns pids "$ns" | while read -r p; do c=$(cat /proc/$p/comm 2>/dev/null); case "$c" in pstrain-*) echo "$p";; esac; done)
[ -z "$left" ] || fail "pstrain processes left on $there after the run: $left"
echo "PASS"
