#!/usr/bin/env bash
# docs/scaling.md's model against a measurement: a sync job over H hosts made
# of network namespaces on this machine (as tests/integration/ssh_hosts_test.sh
# makes its second host), each behind a veth on one bridge, its link limited
# to rate B both ways by tc's token bucket (tbf; 0: the veth's own speed). This
# machine's kernel has no netem, so the one-way latency L is the veth's, measured
# (ping between two hosts, half the round trip). H servers and H workers,
# one of each per host (the scheduler on host 0), every role started by hand
# (`ip netns exec`) over tcp (cluster.transport "tcp": no shared memory between
# the namespaces); the workers' step records give the measured communication
# per step (push_ms + pull_ms: from the push sent to the new weights in), the
# servers' logs the model's size. Prints one JSON line: the inputs, the
# prediction and the measurement (medians over the steps after the first 5).
# Needs root and iproute2 with tc; skipped (exit 77, saying why) otherwise.
#   tools/bench/netns_model.sh BIN_DIR SOURCE_DIR HOSTS RATE_MBIT [STEPS]
set -euo pipefail
bin="${1:?BIN_DIR}"; src="${2:?SOURCE_DIR}"; hosts="${3:?HOSTS}"; rate="${4:?RATE_MBIT}"
steps="${5:-40}"
skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || skip "not root: cannot make network namespaces"
command -v ip >/dev/null && command -v tc >/dev/null || skip "no ip or tc (iproute2)"
for p in pstrain-scheduler pstrain-server pstrain-worker pstrain-keygen; do [ -x "$bin/$p" ] || fail "no $bin/$p"; done

tag=$(( $$ % 200 + 20 ))
br="psmb$tag"
net="10.233.$tag"
tmp=$(mktemp -d /tmp/pstrain-netns-XXXXXX)
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for h in $(seq 0 $((hosts - 1))); do ip netns del "psm$tag-$h" 2>/dev/null; ip link del "psm${tag}h$h" 2>/dev/null; done
  ip link del "$br" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ip link add "$br" type bridge 2>"$tmp/err" || skip "no bridge: $(cat "$tmp/err")"
ip link set "$br" up
for h in $(seq 0 $((hosts - 1))); do
  ns="psm$tag-$h"; out="psm${tag}h$h"; in="psm${tag}n$h"
  ip netns add "$ns" 2>"$tmp/err" || skip "ip netns add failed: $(cat "$tmp/err")"
  ip link add "$out" type veth peer name "$in"
  ip link set "$in" netns "$ns"
  ip link set "$out" master "$br" up
  ip netns exec "$ns" ip addr add "$net.$((h + 1))/24" dev "$in"
  ip netns exec "$ns" ip link set "$in" up
  ip netns exec "$ns" ip link set lo up
  if [ "$rate" != 0 ]; then  # both directions of the host's link: rate B, a 1-second queue, a 4 KB burst
    tbf="tbf rate ${rate}mbit burst 4kb latency 1000ms"
    tc qdisc add dev "$out" root $tbf 2>"$tmp/err" || skip "tc tbf failed: $(cat "$tmp/err")"
    ip netns exec "$ns" tc qdisc add dev "$in" root $tbf
  fi
done
# L: half the median round trip of one byte over TCP between host 1 and host 0 (idle links; no ping here).
echo_port=$(( 40000 + $$ % 20000 ))
ip netns exec "psm$tag-0" /usr/bin/python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('$net.1', $echo_port)); s.listen(1)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    b = c.recv(1)
    if not b: break
    c.sendall(b)" &
echo_pid=$!
delay_ms=$(ip netns exec "psm$tag-1" /usr/bin/python3 -c "
import socket, statistics, time
for _ in range(100):
    try:
        c = socket.create_connection(('$net.1', $echo_port)); break
    except OSError: time.sleep(0.05)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtt = []
for _ in range(400):
    t = time.perf_counter(); c.sendall(b'x'); c.recv(1); rtt.append(time.perf_counter() - t)
print(round(1e3 * statistics.median(rtt[50:]) / 2, 4))")
wait "$echo_pid" || true
[ -n "$delay_ms" ] || fail "no round trip between the hosts"

server_hosts=$(for h in $(seq 0 $((hosts - 1))); do printf '"%s.%d",' "$net" $((h + 1)); done)
"$bin/pstrain-keygen" --secret "$tmp/secret" >/dev/null
port=$(( 20000 + $$ % 20000 ))
common=(--config "$src/configs/tiny_sync.toml" --set "output.run_dir=$tmp/run" --set "cluster.servers=$hosts"
        --set "cluster.workers=$hosts" --set "cluster.transport=\"tcp\"" --set "cluster.server_hosts=[${server_hosts%,}]"
        --set "cluster.scheduler=\"tcp://$net.1:$port\"" --set "security.secret_file=$tmp/secret"
        --set "output.trace=off" --set "workload.synthetic_train=$((steps * 32 * hosts))" --set "workload.epochs=1")
ip netns exec "psm$tag-0" "$bin/pstrain-scheduler" "${common[@]}" >"$tmp/scheduler.txt" 2>&1 &
pids+=($!)
for h in $(seq 0 $((hosts - 1))); do
  ip netns exec "psm$tag-$h" "$bin/pstrain-server" "${common[@]}" --rank "$h" >"$tmp/server-$h.txt" 2>&1 &
  pids+=($!)
  ip netns exec "psm$tag-$h" "$bin/pstrain-worker" "${common[@]}" --rank "$h" >"$tmp/worker-$h.txt" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
pids=()
if [ "$status" != 0 ]; then
  tail -n 5 "$tmp"/*.txt >&2
  fail "a role exited $status"
fi
/usr/bin/python3 - "$tmp" "$hosts" "$delay_ms" "$rate" <<'PY'
# The model (docs/scaling.md) for this layout: host h holds worker h and server h (m_h bytes of the
# model's M); a step moves, each way on host h's link, the worker's chunks on the other servers
# (M - m_h) and its server's chunk for the other workers ((H - 1) m_h). Predicted communication per
# step: "overlap": 2 L + the busiest link's bytes / B (pushes and replies at once: many chunks per
# server); "serial": 2 L + the busiest server's pushes in, then its replies out, 2 (H - 1) m_h / B (a
# server holding one chunk answers a pull only once every push of it is in: sync's critical path).
import glob, json, re, statistics, sys
tmp, hosts, delay_ms, rate_mbit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
comm, compute, by_step = [], [], {}
for path in sorted(glob.glob(tmp + "/run/metrics/worker-*.jsonl")):
    rows = [json.loads(line) for line in open(path) if '"type":"step"' in line]
    for r in rows[5:]:
        comm.append(r["push_ms"] + r["pull_ms"])
        compute.append(r["compute_ms"])
        by_step.setdefault(r["step"], []).append(r["compute_ms"])
# Sync: a worker's pull waits for the slowest worker's push too. Not the network: the compute's
# spread, measured (each worker's wait for the slowest compute of its step, median).
straggler = [max(c) - x for c in by_step.values() if len(c) == hosts for x in c]
held = {}
for path in glob.glob(tmp + "/*.txt") + glob.glob(tmp + "/run/logs/*.log"):
    for m in re.finditer(r"server (\d+)\] listening on .*?holds \d+ chunks \((\d+) bytes\)", open(path, errors="replace").read()):
        held[int(m.group(1))] = int(m.group(2))
if len(held) != hosts or not comm:
    sys.exit("netns_model: no model size for every server (%r) or no steps (%d)" % (held, len(comm)))
M = sum(held.values())
B = rate_mbit * 1e6 / 8  # bytes per second (0: the veth's, not limited: no bandwidth term)
busiest = max((M - m) + (hosts - 1) * m for m in held.values())
link_ms = 1e3 * busiest / B if B > 0 else 0.0
serial_ms = 1e3 * 2 * (hosts - 1) * max(held.values()) / B if B > 0 else 0.0
print(json.dumps({"hosts": hosts, "workers": hosts, "servers": hosts, "delay_ms": delay_ms, "rate_mbit": rate_mbit,
                  "model_bytes": M, "bytes_per_server": [held[k] for k in sorted(held)],
                  "busiest_link_bytes": busiest,
                  "predicted_overlap_ms": round(2 * delay_ms + link_ms, 2),
                  "predicted_serial_ms": round(2 * delay_ms + serial_ms, 2),
                  "straggler_p50_ms": round(statistics.median(straggler), 2) if straggler else None,
                  "steps_measured": len(comm), "comm_p50_ms": round(statistics.median(comm), 2),
                  "comm_p10_ms": round(sorted(comm)[len(comm) // 10], 2),
                  "compute_p50_ms": round(statistics.median(compute), 2)}))
PY
