#!/usr/bin/env bash
# pstrain's push+pull round beside ps-lite's (dmlc/ps-lite), in one run.
#
#   tools/bench_pslite.sh PSLITE_SRC_OR_MIRROR [--json FILE] [--trials N] [--sizes "1 4 16 64"]
#                         [--configs "1x1 2x2"] [--rounds N] [--pstrain-build DIR]
#                         [--baseline-build DIR] [--pstrain-args "ARGS"]
#
# PSLITE_SRC_OR_MIRROR: a ps-lite source tree (has include/ps/ps.h) or a bare
# git directory of it (its HEAD is extracted). ps-lite is built out of the
# repository's sources, in build-pslite/ (gitignored), with Debian's ZeroMQ
# and protobuf (apt-get install -y libzmq3-dev libprotobuf-dev
# protobuf-compiler); nothing is downloaded. The harness of the same round,
# tools/pslite/pslite_round.cc, is built against it. pstrain's side is
# bench_pushpull from --pstrain-build (default build/; build it first).
#
# Configs are SERVERSxWORKERS. For each config and size, trials alternate:
# pstrain (bench_pushpull --trials 1, which also measures raw ZeroMQ and
# memcpy in the same run), ps-lite, pstrain, ps-lite, ... --trials times
# each (default 3). --baseline-build DIR adds another pstrain build (say, the
# commit before a change) to each trial, run first: before and after in one
# run, with their ratio. --pstrain-args adds options to pstrain's
# bench_pushpull (and the baseline's), e.g. "--transport shm" for tensors
# through shared memory (ps-lite has no such mode: it stays on tcp). The table gives per-worker GB/s (2 x size / round time,
# GB = 1e9 bytes, worker 0's median round of a trial), the median and
# min-max over trials of both, the ratio of the medians, and raw ZeroMQ.
# Not part of the default build or of CI.
set -euo pipefail

die() { echo "bench_pslite.sh: $*" >&2; exit 2; }

[[ $# -ge 1 ]] || die "usage: $0 PSLITE_SRC_OR_MIRROR [--json FILE] [--trials N] [--sizes \"1 4 16 64\"] [--configs \"1x1 2x2\"] [--rounds N] [--pstrain-build DIR]"
src_arg=$1
shift
json="" trials=3 sizes="1 4 16 64" configs="1x1 2x2" rounds=0 baseline_build="" pstrain_args=""
repo=$(cd "$(dirname "$0")/.." && pwd)
pstrain_build=$repo/build
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || die "missing value after $1"
  case $1 in
    --json) json=$2 ;;
    --trials) trials=$2 ;;
    --sizes) sizes=$2 ;;
    --configs) configs=$2 ;;
    --rounds) rounds=$2 ;;
    --pstrain-build) pstrain_build=$2 ;;
    --baseline-build) baseline_build=$2 ;;
    --pstrain-args) pstrain_args=$2 ;;
    *) die "unknown option $1" ;;
  esac
  shift 2
done
[[ $trials =~ ^[1-9][0-9]*$ ]] || die "--trials wants a positive integer, got '$trials'"
[[ $rounds =~ ^[0-9]+$ ]] || die "--rounds wants an integer >= 0, got '$rounds'"
for c in $configs; do [[ $c =~ ^[1-9][0-9]*x[1-9][0-9]*$ ]] || die "--configs: '$c' is not SERVERSxWORKERS"; done
for s in $sizes; do [[ $s =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--sizes: '$s' is not a size in MiB"; done

bench_pushpull=$pstrain_build/bin/bench_pushpull
[[ -x $bench_pushpull ]] || die "$bench_pushpull is missing: build pstrain first (tools/build.sh or cmake --build build --target bench_pushpull)"
baseline_bench=""
if [[ -n $baseline_build ]]; then
  baseline_bench=$baseline_build/bin/bench_pushpull
  [[ -x $baseline_bench ]] || die "$baseline_bench is missing: build the baseline's bench_pushpull first"
fi
command -v protoc >/dev/null || die "protoc is missing: apt-get install -y protobuf-compiler libprotobuf-dev"
[[ -f /usr/include/google/protobuf/message.h ]] || die "protobuf headers are missing: apt-get install -y libprotobuf-dev"
[[ -f /usr/include/zmq.h ]] || die "ZeroMQ headers are missing: apt-get install -y libzmq3-dev"
command -v python3 >/dev/null || die "python3 is missing (it summarizes the trials)"

out=$repo/build-pslite
mkdir -p "$out"

# ---- ps-lite sources ----
if [[ -f $src_arg/include/ps/ps.h ]]; then
  src=$(cd "$src_arg" && pwd)
  stamp="dir:$src"
elif commit=$(git --git-dir="$src_arg" rev-parse --verify -q 'HEAD^{commit}' 2>/dev/null); then
  src=$out/src
  stamp="git:$commit"
  if [[ ! -f $src/.stamp || $(cat "$src/.stamp") != "$stamp" ]]; then
    rm -rf "$src" && mkdir -p "$src"
    git --git-dir="$src_arg" archive HEAD | tar -x -C "$src"
    echo "$stamp" >"$src/.stamp"
  fi
  [[ -f $src/include/ps/ps.h ]] || die "$src_arg: HEAD has no include/ps/ps.h (not ps-lite?)"
else
  die "$src_arg is neither a ps-lite source tree (include/ps/ps.h) nor a git directory"
fi

# ---- libps.a, built like ps-lite's Makefile (-O3), one file at a time ----
flags="-std=c++14 -O3 -msse2 -fPIC -w"
lib=$out/lib/libps.a
if [[ ! -f $lib || ! -f $out/lib/.stamp || $(cat "$out/lib/.stamp") != "$stamp $flags" ]]; then
  echo "# building ps-lite ($stamp) in $out/lib" >&2
  rm -rf "$out/lib" && mkdir -p "$out/lib"
  protoc --cpp_out="$out/lib" --proto_path="$src/src" "$src/src/meta.proto"
  objs=()
  for f in "$src"/src/*.cc "$out/lib/meta.pb.cc"; do
    o=$out/lib/$(basename "${f%.cc}").o
    # shellcheck disable=SC2086
    g++ $flags -I"$src/include" -I"$src/src" -I"$out/lib" -c "$f" -o "$o"
    objs+=("$o")
  done
  ar crs "$lib" "${objs[@]}"
  echo "$stamp $flags" >"$out/lib/.stamp"
fi

# ---- the harness (our code) ----
harness=$out/pslite_round
if [[ ! -x $harness || $harness -ot $repo/tools/pslite/pslite_round.cc || $harness -ot $lib ]]; then
  echo "# building $harness" >&2
  g++ -std=c++17 -O3 -Wall -Wextra -Wpedantic -Wshadow -Wconversion -isystem "$src/include" -I"$out/lib" \
    "$repo/tools/pslite/pslite_round.cc" "$lib" -lprotobuf -lzmq -pthread -o "$harness"
fi

# ---- alternating trials ----
tmp=$(mktemp -d /tmp/bench-pslite-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
trials_file=$tmp/trials.jsonl
: >"$trials_file"
rounds_flag=()
[[ $rounds -gt 0 ]] && rounds_flag=(--rounds "$rounds")
for cfg in $configs; do
  servers=${cfg%x*} workers=${cfg#*x}
  for size in $sizes; do
    for ((t = 1; t <= trials; ++t)); do
      echo "# ${servers}x${workers} ${size} MiB trial $t/$trials: ${baseline_bench:+baseline, }pstrain, then ps-lite" >&2
      echo null >"$tmp/pb.json"
      if [[ -n $baseline_bench ]]; then
        # shellcheck disable=SC2086  # word splitting of --pstrain-args is meant
        "$baseline_bench" --servers "$servers" --workers "$workers" --sizes "$size" --trials 1 $pstrain_args \
          "${rounds_flag[@]}" --json "$tmp/pb.json" >/dev/null ||
          die "baseline bench_pushpull failed (${servers}x${workers}, $size MiB)"
      fi
      # shellcheck disable=SC2086
      "$bench_pushpull" --servers "$servers" --workers "$workers" --sizes "$size" --trials 1 $pstrain_args \
        "${rounds_flag[@]}" --json "$tmp/pp.json" >/dev/null ||
        die "bench_pushpull failed (${servers}x${workers}, $size MiB)"
      "$harness" --servers "$servers" --workers "$workers" --sizes "$size" \
        "${rounds_flag[@]}" --json "$tmp/pl.json" >/dev/null ||
        die "pslite_round failed (${servers}x${workers}, $size MiB)"
      python3 - "$tmp/pp.json" "$tmp/pl.json" "$t" "$tmp/pb.json" >>"$trials_file" <<'EOF'
import json, sys
pp, pl = json.load(open(sys.argv[1]))[0], json.load(open(sys.argv[2]))[0]
pb = json.load(open(sys.argv[4]))
print(json.dumps({"servers": pp["servers"], "workers": pp["workers"], "size_mib": pp["size_mib"], "trial": int(sys.argv[3]),
                  "pstrain_gbps": pp["gbps_per_worker"], "pstrain_round_ms": pp["round_ms"], "pstrain_wrong": pp["wrong"],
                  "raw_zmq_gbps": pp["raw_zmq_gbps"], "memcpy_gbps": pp["memcpy_gbps"],
                  "pslite_gbps": pl["gbps_per_worker"], "pslite_round_ms": pl["round_ms"], "pslite_wrong": pl["wrong"],
                  "baseline_gbps": pb[0]["gbps_per_worker"] if pb else None,
                  "baseline_raw_zmq_gbps": pb[0]["raw_zmq_gbps"] if pb else None}))
EOF
    done
  done
done

python3 - "$trials_file" "$json" "$trials" "$pstrain_args" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = {}
for r in rows:
    groups.setdefault((r["servers"], r["workers"], r["size_mib"]), []).append(r)
print(f"# push+pull per worker (GB/s = 2 x size / round, GB = 1e9 bytes), ps-lite and raw ZeroMQ over tcp loopback, sync SGD; "
      f"{sys.argv[3]} alternating trials each; median [min-max]"
      + (f"; pstrain with {sys.argv[4]}" if sys.argv[4] else ""))
base = any(r.get("baseline_gbps") is not None for r in rows)
print(f"{'SxW':>5} {'MiB':>6} {'pstrain GB/s':>24} {'ps-lite GB/s':>24} {'pstrain/ps-lite':>16} {'raw zmq GB/s':>13} {'pstrain/raw':>12} {'#wrong':>7}"
      + (f" {'baseline GB/s':>24} {'pstrain/baseline':>17}" if base else ""))
summary = []
for (s, w, mib), rs in sorted(groups.items()):
    def stat(k):
        v = [r[k] for r in rs]
        return statistics.median(v), min(v), max(v)
    p, l, raw = stat("pstrain_gbps"), stat("pslite_gbps"), stat("raw_zmq_gbps")
    wrong = sum(r["pstrain_wrong"] + r["pslite_wrong"] for r in rs)
    ratio = p[0] / l[0]
    print(f"{f'{s}x{w}':>5} {mib:>6g} {p[0]:>8.3f} [{p[1]:.3f}-{p[2]:.3f}] {l[0]:>8.3f} [{l[1]:.3f}-{l[2]:.3f}] "
          f"{ratio:>15.2f}x {raw[0]:>13.3f} {p[0] / raw[0]:>11.0%} {wrong:>7d}", end="")
    extra = {}
    if base:
        b = stat("baseline_gbps")
        print(f" {b[0]:>8.3f} [{b[1]:.3f}-{b[2]:.3f}] {p[0] / b[0]:>16.2f}x", end="")
        extra = {"baseline_gbps_median": b[0], "baseline_gbps_min": b[1], "baseline_gbps_max": b[2],
                 "ratio_pstrain_vs_baseline": p[0] / b[0]}
    print()
    summary.append({"servers": s, "workers": w, "size_mib": mib, "trials": len(rs),
                    "pstrain_gbps_median": p[0], "pstrain_gbps_min": p[1], "pstrain_gbps_max": p[2],
                    "pslite_gbps_median": l[0], "pslite_gbps_min": l[1], "pslite_gbps_max": l[2],
                    "ratio_pstrain_vs_pslite": ratio, "raw_zmq_gbps_median": raw[0], "ratio_pstrain_vs_raw": p[0] / raw[0],
                    "wrong": wrong, **extra})
if sys.argv[2]:
    with open(sys.argv[2], "w") as f:
        json.dump({"bench": "pstrain_vs_pslite", "summary": summary, "trials": rows}, f, indent=1)
        f.write("\n")
if any(x["wrong"] for x in summary):
    print("bench_pslite.sh: some rounds returned wrong weights (#wrong > 0)", file=sys.stderr)
    sys.exit(1)
EOF
