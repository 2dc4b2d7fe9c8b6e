#!/usr/bin/env bash
# `launch` over ssh to another host: the project's own test host, a network
# namespace with a veth pair and an sshd from Debian's openssh-server, made
# and removed here. Server 1 and worker 0 run "there" (reachable only at the
# namespace's address), the scheduler, server 0 and worker 1 here.
#   1. the run trains to its end, exit 0, with the summary and every log;
#   2. a launcher killed with SIGKILL mid-run leaves no process behind on the
#      other host (its ssh sessions end, the remote side stops the programs).
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
pgrep -f "pstrain-(scheduler|server|worker).*$run2" >/dev/null && fail "processes of the killed run left here"
echo "PASS"
