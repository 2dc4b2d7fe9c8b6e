#!/usr/bin/python3
"""configs/tiny_sync.toml run by a real job engine, Open MPI's mpirun or a
one-node SLURM (slurmctld and slurmd started here with a config of this
test's own), through tools/pstrain-node.sh (one task per process: rank 0 the
scheduler, 1-2 the servers, 3-4 the workers), against the same config run by
the launcher: the run directory holds the same files (config.toml, the logs
under the launcher's names, metrics, summary.json/.md, trace.json with every
process) and the same numbers (sync training is deterministic: the same final
accuracy and the same images per worker). Under SLURM also one elastic
change: a job of 2 workers in 3 slots (cluster.max_workers) and a second job
step that starts a worker with --join: it enters the running job at a step
boundary, and the summary records the change with reason "join".

    engines_test.py BIN_DIR SOURCE_DIR mpirun|slurm

Exit codes: 0 passed; 1 failed (each failed check printed); 77 skipped, the
reason printed (the engine is not installed: `apt-get install openmpi-bin`
or `slurm-wlm`; SLURM's daemons here need root).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 77
FILES = ["config.toml", "logs/scheduler.log", "logs/server-0.log", "logs/server-1.log", "logs/worker-0.log",
         "logs/worker-1.log", "metrics/worker-0.jsonl", "metrics/worker-1.jsonl", "summary.json", "summary.md",
         "trace.json", "weights.npz"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def skip(why: str) -> None:
    print(f"SKIPPED: {why}")
    sys.exit(SKIP)


def run(cmd, timeout=180, **kw) -> subprocess.CompletedProcess:
    print("$ " + " ".join(map(str, cmd)), flush=True)
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout, **kw)


class Slurm:
    """slurmctld and slurmd on this machine, one node, auth/none, state in `root`."""

    def __init__(self, root: Path):
        self.root = root
        host = socket.gethostname()
        self.conf = root / "slurm.conf"
        for d in ("state", "spool", "log"):
            (root / d).mkdir(parents=True)
        self.conf.write_text("\n".join([
            "ClusterName=pstrain-test", f"SlurmctldHost={host}", f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}", "AuthType=auth/none", "CredType=cred/none", "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "SlurmUser=root", "SlurmdUser=root", "MpiDefault=none", "ReturnToService=2",
            f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool",
            f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd.log",
            f"NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN",
            f"PartitionName=pstrain Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES", ""]))
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    def start(self) -> None:
        for daemon in ("slurmctld", "slurmd"):
            r = run([daemon, "-f", self.conf], env=self.env, timeout=60)
            if r.returncode != 0:
                raise RuntimeError(f"{daemon} did not start: {r.stderr.strip()}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the node takes jobs
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env)
            if r.stdout.strip() == "idle":
                return
            time.sleep(0.2)
        raise RuntimeError("the SLURM node did not become idle in 60 s: " + self.logs())

    def logs(self) -> str:
        return "".join((self.root / "log" / f).read_text(errors="replace")[-2000:]
                       for f in ("slurmctld.log", "slurmd.log") if (self.root / "log" / f).exists())

    def stop(self) -> None:
        for pidfile in ("slurmd.pid", "slurmctld.pid"):
            try:
                os.kill(int((self.root / pidfile).read_text().strip()), 15)
            except (OSError, ValueError):
                pass


def check_run(run_dir: Path, reference: dict, failures: list) -> None:
    for f in FILES:
        if not (run_dir / f).is_file():
            failures.append(f"{run_dir / f} is missing (the launcher writes it)")
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        trace = json.loads((run_dir / "trace.json").read_text())
    except (OSError, ValueError) as e:
        failures.append(f"unreadable summary or trace: {e}")
        return
    for key in ("mode", "workers", "servers", "final_test_accuracy"):
        if summary.get(key) != reference.get(key):
            failures.append(f"summary.json {key}: {summary.get(key)!r}, the launcher's run: {reference.get(key)!r}")
    images = [w.get("images") for w in summary.get("per_worker", [])]
    want = [w.get("images") for w in reference.get("per_worker", [])]
    if images != want:
        failures.append(f"images per worker {images}, the launcher's run {want}")
    names = {e["args"]["name"] for e in trace.get("traceEvents", [])
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    if names != {"scheduler", "server 0", "server 1", "worker 0", "worker 1"}:
        failures.append(f"trace.json processes {sorted(names)}")


def elastic_slurm(bin_dir: Path, config: Path, node: Path, run_dir: Path, sets: list, env: dict) -> list:
    """The job of 2 workers (3 slots) by one srun, a worker joining it by a second: the failures found."""
    sets = sets + ["--set", f"output.run_dir={run_dir}", "--set", f"cluster.scheduler=tcp://127.0.0.1:{free_port()}",
                   "--set", "cluster.max_workers=3", "--set", "workload.epochs=20"]
    step = ["srun", "--overcommit", "--oversubscribe", "--mpi=none", "--time=5"]
    cmd = step + ["--ntasks=5", node, config] + sets
    print("$ " + " ".join(map(str, cmd)), flush=True)
    job = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    metrics = run_dir / "metrics" / "worker-0.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and job.poll() is None:  # until worker 0 has trained a step
        if metrics.is_file() and metrics.read_text().count('"type":"step"') >= 1:
            break
        time.sleep(0.1)
    if job.poll() is not None or time.monotonic() >= deadline:
        job.kill()
        return [f"the elastic job did not start training: {job.communicate()[0][-3000:]}"]
    joiner = run(step + ["--ntasks=1", bin_dir / "pstrain-worker", "--config", config] + sets + ["--join"], env=env)
    output = job.communicate(timeout=180)[0]
    failures = []
    if job.returncode != 0:
        failures.append(f"the elastic job exited {job.returncode}: {output[-3000:]}")
    if joiner.returncode != 0:
        failures.append(f"the joining job step exited {joiner.returncode}: {(joiner.stdout + joiner.stderr)[-3000:]}")
    try:
        changes = json.loads((run_dir / "summary.json").read_text()).get("membership_changes", [])
    except (OSError, ValueError) as e:
        return failures + [f"unreadable elastic summary: {e}"]
    if [(c.get("old_workers"), c.get("new_workers"), c.get("reason")) for c in changes] != [(2, 3, "join")]:
        failures.append(f"elastic summary's membership_changes {changes}, expected one 2 -> 3 with reason join")
    if '"type":"join"' not in (run_dir / "metrics" / "worker-2.jsonl").read_text(errors="replace"):
        failures.append("the joiner's metrics have no join record")
    return failures


def main() -> int:
    bin_dir, source, engine = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    needed = {"mpirun": ["mpirun"], "slurm": ["slurmctld", "slurmd", "srun", "sinfo"]}[engine]
    missing = [p for p in needed if shutil.which(p) is None]
    if missing:
        skip(f"{', '.join(missing)} not installed (apt-get install {'openmpi-bin' if engine == 'mpirun' else 'slurm-wlm'})")
    if engine == "slurm" and os.geteuid() != 0:
        skip("a one-node SLURM started by this test runs its daemons as root")
    config = source / "configs" / "tiny_sync.toml"
    node = source / "tools" / "pstrain-node.sh"
    tmp = Path(tempfile.mkdtemp(prefix=f"pstrain-{engine}-"))
    env = dict(os.environ, PSTRAIN_BIN_DIR=str(bin_dir))
    slurm = None
    try:
        # Noisier images than tiny_sync's own, so that the accuracy compared is not a trivial 100%.
        task = ["--set", "workload.synthetic_noise=4.0"]
        ref = run([bin_dir / "launch", "--config", config, "--run-dir", tmp / "launcher", "--quiet"] + task, env=env)
        if ref.returncode != 0:
            print(ref.stdout + ref.stderr)
            return 1
        reference = json.loads((tmp / "launcher" / "summary.json").read_text())
        # The job's secret (security.mode = "off" admits its holders only), as a by-hand job makes it.
        secret = tmp / "secret"
        made = run([bin_dir / "pstrain-keygen", "--secret", secret], env=env)
        if made.returncode != 0:
            print(made.stdout + made.stderr)
            return 1
        sets = task + ["--set", f"security.secret_file={secret}", "--set", f"output.run_dir={tmp / engine}", "--set", f"cluster.scheduler=tcp://127.0.0.1:{free_port()}"]
        if engine == "mpirun":
            cmd = ["mpirun", "--oversubscribe", "-np", "5"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
        else:
            slurm = Slurm(tmp / "slurm")
            slurm.start()
            env["SLURM_CONF"] = str(slurm.conf)
            cmd = ["srun", "--ntasks=5", "--overcommit", "--mpi=none", "--time=5"]
        r = run(cmd + [node, config] + sets, env=env)
        if r.returncode != 0:
            print(r.stdout[-4000:] + r.stderr[-4000:] + (slurm.logs() if slurm else ""))
            print(f"FAILED: {engine} exited {r.returncode}")
            return 1
        failures = []
        check_run(tmp / engine, reference, failures)
        if "Run directory: " not in r.stdout:
            failures.append("rank 0 printed no summary")
        if engine == "slurm":
            failures += elastic_slurm(bin_dir, config, node, tmp / "slurm-elastic",
                                      task + ["--set", f"security.secret_file={secret}"], env)
        for f in failures:
            print("FAILED: " + f)
        if not failures:
            print(f"passed: {engine} ran tiny_sync to the launcher's files and numbers "
                  f"(final test accuracy {reference['final_test_accuracy']})"
                  + ("; a second job step joined a running job with --join" if engine == "slurm" else ""))
        return 1 if failures else 0
    finally:
        if slurm:
            slurm.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
