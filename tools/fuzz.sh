#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (ASan + UBSan) and runs
# each for SECONDS seconds (default 12: about a minute for the four wire decoders,
# the cluster_sequence harness, which also compiles common/, server/ and the
# scheduler (a few minutes the first time), and shm_layer: a shared-memory
# listener fed by a hostile peer sharing its segment).
#   tools/fuzz.sh [SECONDS] [TARGET...]   build, then run (all targets by default)
#   tools/fuzz.sh --seeds                 rewrite fuzz/corpus/ from real encoded messages
# The committed corpus fuzz/corpus/<target>/ is read, never written: new
# inputs go to build-fuzz/corpus/<target>/ (kept between runs, so longer runs
# build on earlier ones). A finding (crash, leak, sanitizer report) fails the
# script and leaves the input in build-fuzz/ (crash-*, leak-*).
# Longer runs: tools/fuzz.sh 3600 message   (or any target; -jobs via FUZZ_ARGS).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CXX=${FUZZ_CXX:-clang++}
if ! command -v "$CXX" >/dev/null; then
  echo "fuzz.sh: $CXX not found (apt-get install clang)" >&2
  exit 1
fi
out=build-fuzz
mkdir -p "$out/obj"
# NDEBUG as in the Release build: toml++'s internal debug assertions fire on
# malformed input that its release parser reports as a parse error.
flags=(-std=c++20 -O1 -g -DNDEBUG -fno-omit-frame-pointer -I. -fsanitize=address,undefined
       -fno-sanitize-recover=undefined)
# Objects of the project's sources, instrumented for coverage; rebuilt when
# their .cc is newer, and all of them when any header changed since the last
# build (a stale object with an old struct layout crashes far from its cause).
stamp="$out/obj/.headers-stamp"
if [ -f "$stamp" ] && [ -n "$(find common server scheduler worker tools fuzz -name '*.h' -newer "$stamp" -print -quit)" ]; then
  rm -f "$out"/obj/*.o
fi
touch "$stamp"
compile() {  # SRC... -> appends their objects to objs
  for src in "$@"; do
    local obj="$out/obj/$(basename "${src%.cc}").o"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
      "$CXX" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
    fi
    objs+=("$obj")
  done
}
objs=()
compile common/wire/protocol.cc common/wire/buffer.cc common/base/bfloat16.cc common/math/param_layout.cc common/math/shard_map.cc common/base/stream_copy.cc
config_objs() {  # only the config target (and the seeds) need the TOML parser
  compile common/config/config.cc common/config/config_values.cc common/config/config_fields.cc common/base/endpoint_address.cc
}
# cluster_sequence runs a real scheduler and server: all of common/ (the
# server's checkpoints, optimizer, logs, ...; the ZeroMQ and shared-memory
# transports), server/ and the scheduler.
cluster_objs() {
  local srcs=(common/*/*.cc common/transport/zmq/*.cc common/transport/shm/*.cc server/*.cc scheduler/*.cc)
  local src
  for src in "${srcs[@]}"; do
    case "$src" in
      */main.cc|common/wire/protocol.cc|common/wire/buffer.cc|common/base/bfloat16.cc|common/math/param_layout.cc|common/math/shard_map.cc|common/base/stream_copy.cc) ;;
      *) compile "$src" ;;
    esac
  done
}
libs=(-lzmq -lsodium -ltomlplusplus -lz -ldl -lpthread)  # libsodium: the job secret's HMAC (common/wire/job_secret)

if [ "${1:-}" = "--seeds" ]; then
  config_objs
  "$CXX" "${flags[@]}" fuzz/make_seeds.cc "${objs[@]}" "${libs[@]}" -o "$out/make_seeds"
  rm -rf fuzz/corpus
  "$out/make_seeds" fuzz/corpus
  find fuzz/corpus -type f | sort
  exit 0
fi

seconds=${1:-12}
shift || true
targets=("$@")
# config is not in the default set: Debian's toml++ (3.3) reaches
# TOML_UNREACHABLE (undefined behaviour) in is_non_ascii_horizontal_whitespace
# for some non-ASCII characters, which UBSan reports within seconds; run it by
# name (tools/fuzz.sh 60 config) once toml++ is fixed or replaced.
if [ ${#targets[@]} -eq 0 ]; then targets=(message register_request register_reply store_entry cluster_sequence shm_layer); fi
base_objs=("${objs[@]}")
for t in "${targets[@]}"; do
  objs=("${base_objs[@]}")
  if [ "$t" = config ]; then config_objs; fi
  if [ "$t" = cluster_sequence ] || [ "$t" = shm_layer ]; then cluster_objs; fi
  "$CXX" "${flags[@]}" -fsanitize=fuzzer "fuzz/$t.cc" "${objs[@]}" "${libs[@]}" -o "$out/fuzz_$t"
done
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t"
  echo "fuzz.sh: $t for ${seconds} s"
  rc=0
  (cd "$out" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "./fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -max_len=65536 ${FUZZ_ARGS:-} \
    "corpus/$t" "../fuzz/corpus/$t" >"fuzz_$t.log" 2>&1) || rc=$?
  grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|SUMMARY)" "$out/fuzz_$t.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -40 "$out/fuzz_$t.log" >&2
    echo "fuzz.sh: $t failed (exit $rc); log $out/fuzz_$t.log, inputs in $out/" >&2
    exit 1
  fi
done
echo "fuzz.sh: no findings"
