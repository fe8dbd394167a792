"""One rank stuck past the timeout, under mpirun and under dtensor-run (Gloo);
then a subgroup with the stuck rank, and one rank that dies, under mpirun.

Runs dtensor-test-mpi-timeout (rank 1 sleeps, the others allreduce) and
checks that the waiting ranks raise TimeoutError within the timeout, that
the MPI job then ends with MPI_Abort (non-zero, no hang), and that the
message is the one Gloo gives for the same stuck rank: the same operation
text and "timed out".

usage: check_timeout.py MPIEXEC PROGRAM [DTENSOR_RUN]
"""
import re
import subprocess
import sys
import time

TIMEOUT_MS = 1000
SLEEP_MS = 2500
LINE = re.compile(r"rank (\d+): TimeoutError after (\d+) ms: \[dtensor\.(\w+)\] (.*?): timed out")


def run(cmd):
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return p, time.monotonic() - start


def timeouts(output):
    return {int(m.group(1)): (int(m.group(2)), m.group(3), m.group(4))
            for m in LINE.finditer(output)}


def main():
    mpiexec, program = sys.argv[1], sys.argv[2]
    failures = []
    p, secs = run([mpiexec, "-n", "3", program, str(TIMEOUT_MS), str(SLEEP_MS)])
    out = p.stdout + p.stderr
    print(out)
    got = timeouts(out)
    if p.returncode == 0:
        failures.append("mpirun exited 0: the job should end with MPI_Abort after the timeout")
    if "ending the MPI job with MPI_Abort" not in out:
        failures.append("no MPI_Abort report")
    if secs > SLEEP_MS / 1000 + 20:
        failures.append(f"the job took {secs:.1f} s")
    for r in (0, 2):
        if r not in got:
            failures.append(f"rank {r} raised no TimeoutError")
            continue
        ms, backend, op = got[r]
        if backend != "mpi" or op != "allreduce(sum, 4 x f32)":
            failures.append(f"rank {r}: unexpected message [{backend}] {op}")
        if not TIMEOUT_MS * 0.9 <= ms <= TIMEOUT_MS + 3000:
            failures.append(f"rank {r}: TimeoutError after {ms} ms, timeout {TIMEOUT_MS} ms")
    # Communicator creation is bounded too: a subgroup with the stuck rank.
    s, _ = run([mpiexec, "-n", "3", program, str(TIMEOUT_MS), str(SLEEP_MS), "subgroup"])
    sout = s.stdout + s.stderr
    print(sout)
    sub = timeouts(sout)
    if s.returncode == 0 or not any(v[2] == "new_subgroup([0, 1, 2])" for v in sub.values()):
        failures.append("new_subgroup with a stuck member raised no TimeoutError")
    # A rank that dies: mpirun ends the job, long before a 30 s timeout.
    d, dsecs = run([mpiexec, "-n", "3", program, "30000", "die"])
    print(d.stdout + d.stderr)
    if d.returncode == 0:
        failures.append("a rank died and mpirun exited 0")
    if dsecs > 15:
        failures.append(f"a rank died and the job took {dsecs:.1f} s to end")
    if len(sys.argv) > 3:
        # The same job over Gloo: the same operation text and "timed out".
        g, _ = run([sys.argv[3], "-n", "3", "--", program, str(TIMEOUT_MS), str(SLEEP_MS)])
        gout = g.stdout + g.stderr
        print(gout)
        gloo = {v[2] for v in timeouts(gout).values() if v[1] == "gloo"}
        mpi = {v[2] for v in got.values()}
        if not gloo:
            failures.append("under Gloo no rank raised TimeoutError")
        elif gloo != mpi:
            failures.append(f"messages differ: gloo {gloo}, mpi {mpi}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
