#!/usr/bin/env bash
# Runs a command of this project inside a fresh Debian 12 root, as on a new
# machine with nothing installed: debootstrap (minbase) into a temporary
# directory, the project's files copied in, the command run there by chroot
# with /proc, /sys and /dev mounted, then everything unmounted and removed.
# A missing install step in tools/install_deps.sh fails here, not on a
# user's first run.
#
#   tools/fresh_root.sh [--keep] [--mirror URL] [--] COMMAND [ARGS...]
#   tools/fresh_root.sh tools/test.sh          # what .ci/run does
#   tools/fresh_root.sh tools/run.sh configs/tiny_sync.toml
#
# COMMAND runs in the copy's root directory (/pstrain inside the new root).
# --keep leaves the root in place and prints where (for a look afterwards;
# remove it with: umount -R ROOT/{proc,sys,dev} 2>/dev/null; rm -rf ROOT).
# Needs root, debootstrap (installed with apt when missing) and Debian's
# package mirror. The CUDA toolkit is not a Debian package: builds in the
# fresh root have no CUDA backend (CMake's PSTRAIN_CUDA=AUTO finds no nvcc).
set -euo pipefail

keep=0
mirror="${PSTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1; shift ;;
    --mirror) mirror="$2"; shift 2 ;;
    --) shift; break ;;
    -*) echo "fresh_root.sh: unknown option '$1'" >&2; exit 3 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: tools/fresh_root.sh [--keep] [--mirror URL] [--] COMMAND [ARGS...]" >&2
  exit 3
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "fresh_root.sh: needs root (debootstrap, mount, chroot)" >&2
  exit 3
fi

project="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf '[fresh-root %(%H:%M:%S)T] %s\n' -1 "$*"; }

if ! command -v debootstrap >/dev/null 2>&1; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

root="$(mktemp -d "${TMPDIR:-/var/tmp}/pstrain-fresh-root.XXXXXX")"
chmod 755 "$root"  # it becomes "/": mktemp's 0700 would keep apt's _apt user out
mounted=()
cleanup() {
  local rc=$?
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -R "${mounted[i]}" 2>/dev/null || umount -lR "${mounted[i]}" 2>/dev/null || true
  done
  if [ "$keep" -eq 1 ]; then
    say "kept the root at $root"
  else
    # --one-file-system: never follow a mount that failed to come off into the host.
    rm -rf --one-file-system "$root"
    say "removed $root"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "debootstrap bookworm (minbase) from $mirror into $root"
started=$SECONDS
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1; then
  tail -n 30 "$root.debootstrap.log" >&2
  rm -f "$root.debootstrap.log"
  echo "fresh_root.sh: debootstrap failed (log above)" >&2
  exit 1
fi
tail -n 1 "$root.debootstrap.log"
rm -f "$root.debootstrap.log"
say "debootstrap done in $((SECONDS - started)) s"

# The suites a Debian 12 machine has: updates and security beside the release.
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cp /etc/hosts "$root/etc/hosts" 2>/dev/null || true

for fs in proc sys dev; do
  mkdir -p "$root/$fs"
done
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys" && mounted+=("$root/sys")
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev" && mounted+=("$root/dev")

# The project as a fresh clone has it: tracked files and untracked ones git
# does not ignore (no build/, no runs/).
mkdir -p "$root/pstrain"
if git -C "$project" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$project" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done |
    tar --null -T - -cf -) | tar -xf - -C "$root/pstrain"
else
  tar -C "$project" --exclude=./build --exclude=./runs -cf - . | tar -xf - -C "$root/pstrain"
fi
say "copied the project ($(du -sh "$root/pstrain" | cut -f1)) to /pstrain"

quoted=""
for arg in "$@"; do quoted+=" $(printf '%q' "$arg")"; done
say "chroot: cd /pstrain &&$quoted"
set +e
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  TERM="${TERM:-dumb}" CI="${CI:-}" \
  chroot "$root" /bin/bash -c "cd /pstrain &&$quoted"
rc=$?
set -e
say "command exited with $rc after $((SECONDS - started)) s in all"
exit "$rc"
