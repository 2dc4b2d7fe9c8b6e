#!/usr/bin/env python3
"""Checks the direction of the project's includes (docs/architecture.md).

common/'s libraries are ordered (LAYERS below, as common/CMakeLists.txt links
them): a file in one may include only its own folder and the folders before
it. server/, scheduler/ and worker/ include common/ but never each other;
nothing under common/, server/, scheduler/ or worker/ includes tools/ or tests/.
Prints each include that breaks a rule (file:line) and exits 1, or exits 0.
Usage: tools/check_layers.py [ROOT]
"""
import pathlib
import re
import sys

LAYERS = ["base", "config", "math", "observe", "wire", "transport", "checkpoint", "node"]
NODES = ["server", "scheduler", "worker"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def allowed(src: pathlib.PurePosixPath, target: str) -> bool:
    top = src.parts[0]
    dest = target.split("/")
    if dest[0] in ("tools", "tests", "fuzz"):
        return top in ("tools", "tests", "fuzz")
    if top == "common":
        if dest[0] != "common" or len(dest) < 3:
            return False
        return dest[1] in LAYERS and LAYERS.index(dest[1]) <= LAYERS.index(src.parts[1])
    if top in NODES:
        return dest[0] in ("common", top)
    return True


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    bad = []
    for top in ["common"] + NODES:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in (".h", ".cc", ".cu", ".cuh") or not path.is_file():
                continue
            rel = pathlib.PurePosixPath(path.relative_to(root).as_posix())
            if top == "common" and (len(rel.parts) < 3 or rel.parts[1] not in LAYERS):
                bad.append(f"{rel}: a file of common/ outside its libraries ({', '.join(LAYERS)})")
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and "/" in m.group(1) and not allowed(rel, m.group(1)):
                    bad.append(f"{rel}:{number}: includes {m.group(1)}")
    for line in bad:
        print(line)
    if bad:
        print(f"check_layers: {len(bad)} include(s) against the layering (docs/architecture.md)")
        return 1
    print("check_layers: every include points down the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
