"""The GPU check's judge on the GPU paths it can only take on a GPU: synthetic recordings (made
from a real, empty one, so that every column compare.py reads exists) and workload results, each
once as a GPU would give them (every line ok) and once with one thing wrong (that line FAIL).
A judge that breaks or cannot fail here would only show it in the 15 minutes of a GPU session.

usage: test_compare.py EACGM
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def judge(*args):
    p = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), *args],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def expect(name, got, want_rc, must=(), must_not=()):
    rc, out = got
    bad = [f"exit {rc}, wanted {want_rc}"] if rc != want_rc else []
    bad += [f"no line with {m!r}" for m in must if m not in out]
    bad += [f"a line with {m!r}" for m in must_not if m in out]
    if "Traceback" in out or "could not be checked" in out:
        bad.append("the judge itself broke")
    print(f"{'ok' if not bad else 'FAIL'}: {name}")
    if bad:
        failures.append(name)
        print("  " + "; ".join(bad) + "\n" + "".join(f"    | {l}\n" for l in out.splitlines()))


class Recording:
    def __init__(self, empty, path):
        shutil.copy(empty, path)
        self.path, self.c = path, sqlite3.connect(path)
        self.c.execute("INSERT OR REPLACE INTO meta VALUES ('recording_state', 'complete')")
        self.c.execute("INSERT OR REPLACE INTO meta VALUES ('layers', 'cuda,gputime')")

    def call(self, name, ts, tid=7, **kw):
        cols = {"ts_ns": ts, "dur_ns": 2000, "pid": 1, "tid": tid, "name": name, **kw}
        self.c.execute(f"INSERT INTO cuda_calls({','.join(cols)}) VALUES "
                       f"({','.join('?' * len(cols))})", list(cols.values()))

    def gpu(self, kind, ts, dur, corr, name=None, tid=None, bytes=None):
        self.c.execute("INSERT INTO gpu_activity(ts_ns, dur_ns, pid, tid, kind, device, "
                       "correlation, name, bytes) VALUES (?,?,1,?,?,0,?,?,?)",
                       (ts, dur, tid, kind, corr, name, bytes))

    def launch(self, ts, corr, kernel, dur, gpu_ts=None, stack=1, driver_too=False,
               static_runtime=False):
        """a cudaLaunchKernel as eacgm's uprobe and CUPTI both see it, and its execution; with
        static_runtime, a launch of cuBLASLt's own copy of the runtime: CUPTI's runtime record,
        and only the driver launch inside it among eacgm's rows"""
        if static_runtime:
            self.call("cuLaunchKernelEx", ts + 1800, kernel=kernel, py_stack=stack)
        else:
            self.call("cudaLaunchKernel", ts, kernel=kernel, py_stack=stack)
        if driver_too and not static_runtime:
            self.call("cuLaunchKernel", ts + 300, kernel=kernel)
        self.gpu("launch", ts + 800, 1500, corr,
                 "cudaLaunchKernelExC" if static_runtime else "cudaLaunchKernel", tid=7)
        self.gpu("kernel", gpu_ts or ts + 10_000, dur, corr, kernel)

    def close(self):
        self.c.commit()
        self.c.close()
        return self.path


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def main(eacgm):
    tmp = tempfile.mkdtemp(prefix="eacgm-test-compare.")
    try:
        empty = os.path.join(tmp, "empty.db")
        subprocess.run([eacgm, "record", "-q", "-o", empty, "--", "/bin/true"], check=True,
                       timeout=120)
        cuda_program(tmp, empty)
        training(tmp, empty)
        nccl(tmp, empty)
        cost(tmp)
    finally:
        shutil.rmtree(tmp)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


def cuda_program(tmp, empty):
    """step 2: the CUDA program's kernels, copies and memset, and its cudaEvents"""
    def make(name, spin_ms):
        r = Recording(empty, os.path.join(tmp, name))
        corr, ts = 1, 1_000_000
        for kernel, n, dur in (("eacgm_check_axpy", 3, 3500), ("eacgm_check_spin", 2, spin_ms * 1e6)):
            for _ in range(n):
                r.launch(ts, corr, f"{kernel}(float*, float const*, float, int)", int(dur))
                corr, ts = corr + 1, ts + 2_000_000
        r.call("cudaMemcpy", ts, memcpy_kind="HostToDevice", bytes=4096)
        r.gpu("memcpy", ts + 5000, 3000, corr, "HostToDevice", bytes=4096)
        r.call("cudaMemset", ts + 100_000)
        r.gpu("memset", ts + 105_000, 1000, corr + 1, bytes=4096)
        return r.close()

    known = write(os.path.join(tmp, "known.json"), {
        "bytes_per_copy": 4096, "kernels": {"eacgm_check_axpy": 3, "eacgm_check_spin": 2},
        "copies": {"HostToDevice": 1}, "memsets": 1,
        "calls": {"cudaLaunchKernel": 5, "cudaMemcpy": 1, "cudaMemset": 1},
        "gpu_ms": {"eacgm_check_axpy": [0.012] * 3, "eacgm_check_spin": [1.0, 1.0]},
        "first_error": ""})
    expect("cuda: a GPU's recording", judge("cuda", make("good.db", 1.01), known), 0,
           must=["ok    eacgm_check_spin GPU time (gputime)", "+1.0% (within 5%)",
                 "ok    kernels linked to their launch", "ok    launches found among cuda_calls"])
    expect("cuda: a long kernel 8% off its cudaEvents", judge("cuda", make("slow.db", 1.08), known),
           1, must=["FAIL  eacgm_check_spin GPU time (gputime)"])


def training(tmp, empty):
    """steps 3 and 7: the training's kernels against torch.profiler's"""
    sgemm = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_" \
            "segment_k_off_kernel__5x_cublas"
    ew = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, " \
         "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, " \
         "at::detail::Array<char*, 1>)"
    profile = write(os.path.join(tmp, "profile.json"), {
        "kernels": {ew: 20, sgemm: 10, "Memcpy HtoD (Pageable -> Device)": 10,
                    "Optimizer.step#SGD.step": 10}, "steps": 10, "runtime": {}})
    window = [1_000_000, 10**9]

    def make(name, steps, drop_one=False, in_window=True):
        r = Recording(empty, os.path.join(tmp, name))
        ts, corr = 2_000_000, 1
        for _ in range(steps):
            for kernel in [ew, ew, sgemm]:
                r.launch(ts, corr, kernel, 4000, driver_too=True, static_runtime=kernel == sgemm,
                         gpu_ts=None if in_window else 2 * 10**9 + ts)
                ts, corr = ts + 40_000, corr + 1
            r.call("cudaMemcpyAsync", ts, memcpy_kind="HostToDevice", bytes=64)
            r.gpu("memcpy", ts + 5000, 2000, corr, "HostToDevice", bytes=64)
            ts, corr = ts + 40_000, corr + 1
        if drop_one:
            r.c.execute("DELETE FROM gpu_activity WHERE rowid = (SELECT max(rowid) FROM "
                        "gpu_activity WHERE kind = 'kernel')")
        r.c.execute("INSERT INTO torch_calls(ts_ns, dur_ns, pid, tid, name, py_stack) VALUES "
                    "(1, 1, 1, 7, 'aten::mm', 1)")
        r.c.execute("INSERT INTO python_stacks VALUES (1, 0, 'step', '/x/train.py', 3)")
        return r.close()

    result = write(os.path.join(tmp, "result.json"), {"steps": 5, "window_ns": window})
    same = write(os.path.join(tmp, "same.json"), {"steps": 10, "window_ns": window})
    expect("gputrain: the same kernels per step", judge("gputrain", make("t.db", 5), result, profile),
           0, must=["ok    kernel names (gputime)", "ok    kernel counts per step (gputime)",
                    "ok    copies and memsets per step", "15 of 15 (same thread",
                    "driver launch within 50 us after: 5)", "15 with a Python stack"])
    expect("gputrain: a kernel missing", judge("gputrain", make("t1.db", 5, drop_one=True), result,
                                               profile),
           1, must=["FAIL  kernel counts per step (gputime)"])
    expect("train: torch.profiler and eacgm in one process, both saw all",
           judge("train", make("s.db", 10), profile, same, profile), 0,
           must=["ok    GPU time beside torch.profiler", "30 kernels in gpu_activity",
                 "ok    torch.profiler with eacgm beside it"])
    expect("train: eacgm lost the kernels to torch.profiler",
           judge("train", make("s0.db", 10, in_window=False), profile, same, profile), 1,
           must=["FAIL  GPU time beside torch.profiler", "lost, and not said"])
    yielded = make("s2.db", 10, in_window=False)
    c = sqlite3.connect(yielded)
    c.execute("INSERT OR REPLACE INTO meta VALUES ('gputime_notes', 'pid 1: 2 of 2 CUPTI record "
              "buffers never came back: another CUPTI client in this process (torch.profiler, "
              "Nsight Systems) took over CUPTI''s records, and GPU time stopped then')")
    c.commit()
    c.close()
    expect("train: eacgm yielded CUPTI's records to torch.profiler, and said so",
           judge("train", yielded, profile, same, profile), 0,
           must=["ok    GPU time beside torch.profiler", "yields CUPTI's records"])
    lost = write(os.path.join(tmp, "lost.json"), {
        "kernels": {ew: 20, sgemm: 4}, "steps": 10, "runtime": {}})
    expect("train: the job's own profiler lost kernels with eacgm beside it",
           judge("train", make("s1.db", 10), lost, same, profile), 1,
           must=["FAIL  torch.profiler with eacgm beside it", "24 kernels in 10 steps (20.0% "
                 "fewer than without eacgm: 30 in 10)"])
    # torch.profiler's kernel events leave some kernels out that its launch records count
    partial = write(os.path.join(tmp, "partial.json"), {
        "kernels": {ew: 20, "Memcpy HtoD (Pageable -> Device)": 10}, "steps": 10,
        "runtime": {"cudaLaunchKernel": 20, "cuLaunchKernel": 10}})
    expect("gputrain: kernels the profiler launched but left out of its events",
           judge("gputrain", make("t2.db", 5), result, partial), 0,
           must=["ok    kernel names (gputime)", "only eacgm's: " + sgemm[:20],
                 "ok    kernel counts per step (gputime)", "launches 30 in 10"])
    more = write(os.path.join(tmp, "more.json"), {
        "kernels": {ew: 20}, "steps": 10, "runtime": {"cudaLaunchKernel": 40}})
    expect("gputrain: fewer kernels than the profiler's launches",
           judge("gputrain", make("t3.db", 5), result, more), 1,
           must=["FAIL  kernel counts per step (gputime)", "not one per launch"])


def nccl(tmp, empty):
    """step 4: NCCL's profiler plugin, which sees no operation of a one-rank communicator"""
    def make(name, nranks, plugin_rows):
        r = Recording(empty, os.path.join(tmp, name))
        r.c.execute("INSERT OR REPLACE INTO meta VALUES ('gputime_notes', 'pid 1: NCCL profiler "
                    "plugin v5 (first communicator: rank 0 of %d)')" % nranks)
        for i in range(3):
            r.c.execute("INSERT INTO comm_calls(ts_ns, dur_ns, pid, tid, name, bytes, rank, nranks, "
                        "comm) VALUES (?, 10000, 1, 7, 'ncclAllReduce', 4096, 0, ?, 1)",
                        (1_000_000 * (i + 1), nranks))
            if plugin_rows:
                r.c.execute("INSERT INTO gpu_collectives(ts_ns, dur_ns, pid, tid, name) VALUES "
                            "(?, 0, 1, 7, 'ncclAllReduce')", (1_000_000 * (i + 1) + 2000,))
        return r.close()

    result = write(os.path.join(tmp, "dist.json"), {"backend": "nccl", "allreduce_calls": 3})
    expect("comm: one rank, no operation for the plugin", judge("comm", make("n1.db", 1, False), result),
           0, must=["n/a   NCCL all_reduce seen by the plugin", "world size 1"])
    expect("comm: two ranks, no operation for the plugin", judge("comm", make("n2.db", 2, False), result),
           1, must=["FAIL  NCCL all_reduce seen by the plugin"])
    expect("comm: two ranks, each operation inside its call",
           judge("comm", make("n3.db", 2, True), result), 0,
           must=["ok    NCCL all_reduce seen by the plugin", "ok    each inside its ncclAllReduce call"])


def cost(tmp):
    """step 6: GPU time's cost, full as a figure, duty-cycled judged against 2%"""
    def run(name, sps):
        return write(os.path.join(tmp, name), {"steps": int(sps * 15), "steps_per_s": sps,
                                               "device": "cuda"})
    u, r, p, r0 = run("u.json", 100), run("r.json", 80), run("p.json", 70), run("r0.json", 90)
    expect("cost: duty-cycled within 2%", judge("cost", u, r, p, r0, run("d.json", 89)), 0,
           must=["ok    GPU time, full", "+12.5% step time", "ok    GPU time, 1s/10s", "+1.1%"])
    expect("cost: duty-cycled over 2%", judge("cost", u, r, p, r0, run("d2.json", 85)), 1,
           must=["FAIL  GPU time, 1s/10s", "+5.9%"])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
