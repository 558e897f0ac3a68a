// The recording writer: schema, batching, and a writer thread that commits each batch.
#include "store/recording.h"

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "store/python_tables.h"
#include "store/sample_tables.h"
#include "store/sqlite_util.h"
#include "util/error.h"
#include "util/output_file.h"

namespace eacgm {

const char* const kRecordingSchema = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
-- job_id, rank, local_rank, world_size: from the launcher's environment (torchrun, Open MPI,
-- Slurm) when the process started. host: the host it ran on, in recordings made by eacgm merge
-- (NULL: meta's hostname); host_pid: its pid there, where merge had to renumber it.
CREATE TABLE processes(pid INTEGER NOT NULL, ppid INTEGER, name TEXT, command TEXT,
                       start_ns INTEGER, end_ns INTEGER, exit_code INTEGER, job_id TEXT,
                       rank INTEGER, local_rank INTEGER, world_size INTEGER, host TEXT,
                       host_pid INTEGER);
CREATE TABLE threads(pid INTEGER NOT NULL, tid INTEGER NOT NULL, name TEXT);
-- Host-side CUDA API calls: dur_ns is the time in the API call (enqueue time for async calls),
-- not GPU execution time.
CREATE TABLE cuda_calls(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, pid INTEGER NOT NULL,
                        tid INTEGER NOT NULL, name TEXT NOT NULL, ret INTEGER, bytes INTEGER,
                        memcpy_kind TEXT, stream INTEGER, grid_x INTEGER, grid_y INTEGER,
                        grid_z INTEGER, block_x INTEGER, block_y INTEGER, block_z INTEGER,
                        shared_mem INTEGER, kernel TEXT, address INTEGER, py_stack INTEGER,
                        runq_ns INTEGER);
-- Host layer, one row per scope and sampling interval (counts over the interval ending at ts_ns).
-- scope 'process' (id = pid), 'net' (id = ifindex in netns), 'disk' (id = major << 20 | minor).
-- tx/rx bytes: frames with link-layer headers for 'net'; socket payload for 'process'.
-- taker_*: for 'process', who had the CPUs its threads waited for the most, by process name:
-- the name, the wait charged to those processes, how many, and the pid charged the most.
CREATE TABLE host_samples(ts_ns INTEGER NOT NULL, interval_ns INTEGER NOT NULL,
                          scope TEXT NOT NULL, id INTEGER NOT NULL, netns INTEGER, name TEXT,
                          runq_wait_ns INTEGER, runq_waits INTEGER, runq_max_ns INTEGER,
                          voluntary_switches INTEGER, involuntary_switches INTEGER,
                          offcpu_ns INTEGER, oncpu_ns INTEGER,
                          tx_bytes INTEGER, tx_packets INTEGER, rx_bytes INTEGER,
                          rx_packets INTEGER, io_ops INTEGER, io_bytes INTEGER,
                          read_ops INTEGER, read_bytes INTEGER, write_ops INTEGER,
                          write_bytes INTEGER, io_latency_ns INTEGER, io_latency_max_ns INTEGER,
                          tcp_retransmits INTEGER, page_faults INTEGER, reclaim_ns INTEGER,
                          reclaims INTEGER, pagein_bytes INTEGER, stall_ns INTEGER,
                          stall_end_ns INTEGER, stalls INTEGER, taker_name TEXT,
                          taker_ns INTEGER, taker_procs INTEGER, taker_pid INTEGER);
-- GPU layer (NVML), sampled every interval. NULL: not supported by this GPU or driver.
CREATE TABLE gpu_devices(gpu INTEGER PRIMARY KEY, name TEXT, uuid TEXT, pci_bus_id TEXT);
CREATE TABLE gpu_samples(ts_ns INTEGER NOT NULL, gpu INTEGER NOT NULL, sm_util_pct INTEGER,
                         mem_util_pct INTEGER, mem_used_bytes INTEGER, mem_total_bytes INTEGER,
                         temperature_c INTEGER, power_w REAL, power_limit_w REAL,
                         sm_clock_mhz INTEGER, mem_clock_mhz INTEGER,
                         pcie_tx_bytes_per_s INTEGER, pcie_rx_bytes_per_s INTEGER,
                         throttle_reasons INTEGER, throttle_reasons_text TEXT,
                         ecc_corrected INTEGER, ecc_uncorrected INTEGER,
                         nvlink_tx_bytes_per_s REAL, nvlink_rx_bytes_per_s REAL);
-- Per traced process on a GPU. util_ts_ns: NVML's own time of the utilization sample.
CREATE TABLE gpu_process_samples(ts_ns INTEGER NOT NULL, gpu INTEGER NOT NULL,
                                 pid INTEGER NOT NULL, ns_pid INTEGER, util_ts_ns INTEGER,
                                 sm_util_pct INTEGER, mem_util_pct INTEGER,
                                 enc_util_pct INTEGER, dec_util_pct INTEGER,
                                 used_memory_bytes INTEGER);
CREATE TABLE gpu_events(ts_ns INTEGER NOT NULL, gpu INTEGER NOT NULL, xid INTEGER NOT NULL);
-- gputime layer (CUPTI, through eacgm's injection library): each kernel, copy and memset as it
-- ran on the GPU (ts_ns its start, dur_ns its time there, on the recording's clock), and each
-- kernel launch as the CUDA runtime recorded it (kind 'launch': the API call on thread tid).
-- An execution's launch is the launch row of the same pid and correlation. name: kernels'
-- demangled names, copies' direction (HostToDevice...), launches' API function.
CREATE TABLE gpu_activity(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, pid INTEGER NOT NULL,
                          tid INTEGER, kind TEXT NOT NULL, device INTEGER, context INTEGER,
                          stream INTEGER, correlation INTEGER, name TEXT, bytes INTEGER,
                          grid_x INTEGER, grid_y INTEGER, grid_z INTEGER, block_x INTEGER,
                          block_y INTEGER, block_z INTEGER, shared_mem INTEGER,
                          registers INTEGER);
-- gputime layer (NCCL's profiler plugin: eacgm's library): each NCCL collective and
-- point-to-point operation, from when NCCL started enqueueing it on thread tid (ts_ns) to when
-- its proxy thread saw the last channel's kernel stop (dur_ns; 0: never seen), and its time on
-- the GPU (gpu_start_ns, gpu_dur_ns: the channels' kernels by the GPU's own timer; NULL: no
-- channel said). comm_hash is NCCL's communicator hash and seq its sequence number there, both
-- the same on every rank: (comm_hash, seq) is one collective on all ranks. Its API call is the
-- comm_calls row of the same pid and tid whose span holds ts_ns (ncclAllReduce, or the
-- ncclGroupEnd of its group). algbw/busbw: nccl-tests formulas over gpu_dur_ns.
CREATE TABLE gpu_collectives(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL,
                             pid INTEGER NOT NULL, tid INTEGER NOT NULL, name TEXT NOT NULL,
                             comm_hash INTEGER, seq INTEGER, rank INTEGER, nranks INTEGER,
                             peer INTEGER, count INTEGER, datatype TEXT, bytes INTEGER,
                             algo TEXT, proto TEXT, channels INTEGER, channels_seen INTEGER,
                             warps INTEGER, enqueue_ns INTEGER, gpu_start_ns INTEGER,
                             gpu_dur_ns INTEGER, algbw_gbps REAL, busbw_gbps REAL);
-- gputime layer, duty-cycled (EACGM_GPUTIME_DUTY ON/PERIOD): the spans in which CUPTI's records
-- of process pid were on. A process without rows here had them on throughout; with them,
-- gpu_activity holds what ran in these spans only (outside them nothing was collected).
CREATE TABLE gpu_time_slices(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL,
                             pid INTEGER NOT NULL);
-- NCCL calls. dur_ns is host-side (enqueue time for collectives); algbw/busbw follow nccl-tests
-- over that duration, so they bound nothing on the wire. rank/nranks: from the communicator's
-- creation, when it was traced. PyTorch c10d rows (gloo:*): dur_ns lasts until the collective
-- completed; comm is the process group; ret 0 completed, 1 completed with an error, -1 raised
-- before being queued. entry_run_delay_ns: the calling thread's whole wait for a CPU so far, at
-- entry (kernel sched_info.run_delay); between two calls of a thread, its wait in between.
-- comm_id: the communicator's identity, the same in every rank's recording (NCCL: a hash of the
-- ncclUniqueId it was created with; of the parent's and the color for a split); NULL: unknown.
-- comm_seq: a c10d call's sequence number in its process group, the same on every rank of the
-- group (PyTorch's own: it starts where rank 0's rand() put it, +1 per collective).
CREATE TABLE comm_calls(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, pid INTEGER NOT NULL,
                        tid INTEGER NOT NULL, name TEXT NOT NULL, ret INTEGER, count INTEGER,
                        datatype TEXT, bytes INTEGER, redop TEXT, peer INTEGER, comm INTEGER,
                        rank INTEGER, nranks INTEGER, stream INTEGER, algbw_gbps REAL,
                        busbw_gbps REAL, py_stack INTEGER, runq_ns INTEGER,
                        entry_run_delay_ns INTEGER, comm_id INTEGER, comm_seq INTEGER);
-- PyTorch operators (dispatcher entry points). Nested operators lie inside their caller's span.
CREATE TABLE torch_calls(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, pid INTEGER NOT NULL,
                         tid INTEGER NOT NULL, name TEXT NOT NULL, py_stack INTEGER,
                         runq_ns INTEGER);
-- Python layer: traced function calls (a generator's resumption is a call of its own); name is
-- module.qualname, line the function's first line, depth its nesting among traced calls.
CREATE TABLE python_calls(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, pid INTEGER NOT NULL,
                          tid INTEGER NOT NULL, name TEXT NOT NULL, file TEXT, line INTEGER,
                          depth INTEGER, runq_ns INTEGER);
-- Python stacks of calls of the other layers (their py_stack column), deduplicated: one row per
-- frame, depth 0 the innermost; line is the line executing in that frame.
CREATE TABLE python_stacks(id INTEGER NOT NULL, depth INTEGER NOT NULL, name TEXT NOT NULL,
                           file TEXT, line INTEGER, PRIMARY KEY(id, depth));
-- CPU profile (record --sample-hz): a sample of a traced thread each time the perf event of the
-- CPU it ran on fired; its stacks as ids in native_stacks and python_stacks (NULL: none).
CREATE TABLE stack_samples(ts_ns INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,
                           native_stack INTEGER, py_stack INTEGER);
-- Off-CPU profile (record --sample-hz): a traced thread blocked (not runnable) from ts_ns for
-- dur_ns, with its stacks where it blocked; weight_ns is the time the row stands for: waits of
-- a sampling period or more are all kept (weight_ns = dur_ns), shorter ones with probability
-- dur_ns / period, weighing one period, so weights sum to the time spent blocked.
CREATE TABLE offcpu_samples(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL,
                            weight_ns INTEGER NOT NULL, pid INTEGER NOT NULL,
                            tid INTEGER NOT NULL, native_stack INTEGER, py_stack INTEGER);
-- Native (user-space) stacks of the samples, deduplicated: one row per frame, depth 0 the
-- innermost; name is the function ("unknown+0x<offset>" where it cannot be named), module the
-- file its code is in.
CREATE TABLE native_stacks(id INTEGER NOT NULL, depth INTEGER NOT NULL, name TEXT NOT NULL,
                           module TEXT, PRIMARY KEY(id, depth));
-- Written by eacgm detect (each run replaces the previous one's rows).
CREATE TABLE anomalies(ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, layer TEXT NOT NULL,
                       name TEXT NOT NULL, score REAL, threshold REAL, cause TEXT,
                       features TEXT);
CREATE VIEW trace AS
  SELECT ts_ns, dur_ns, pid, tid, 'cuda' AS layer, name,
         COALESCE(kernel, memcpy_kind) AS detail, bytes, ret, runq_ns
  FROM cuda_calls
  UNION ALL
  SELECT ts_ns, dur_ns, pid, tid, 'comm' AS layer, name,
         datatype || COALESCE(' ' || redop, '') AS detail, bytes, ret, runq_ns
  FROM comm_calls
  UNION ALL
  SELECT ts_ns, dur_ns, pid, tid, 'torch' AS layer, name, NULL AS detail, NULL AS bytes,
         NULL AS ret, runq_ns
  FROM torch_calls
  UNION ALL
  SELECT ts_ns, dur_ns, pid, tid, 'python' AS layer, name, file || ':' || line AS detail,
         NULL AS bytes, NULL AS ret, runq_ns
  FROM python_calls;
)sql";

namespace {

// Refuses what may not be replaced, removes an old recording (with --force: regular files
// only, its -wal and -shm beside it) and creates the file 0600 as perf does for perf.data:
// recordings hold command lines, job identities and source file names.
void create_output(const std::string& path, bool force) {
  check_output_file(path, force, "-o");
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    if (!remove_regular_file(path + suffix))
      fail("cannot replace {}{}: {} (it is not a regular file, or cannot be removed: choose "
           "another -o)", path, suffix, errno_text(errno));
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot create {}: {}", path, errno_text(errno));
  close(fd);
}

}  // namespace

RecordingWriter::RecordingWriter(const std::string& path, bool force, size_t max_queued_rows)
    : path_(path), batch_(std::make_unique<Batch>()), max_queued_rows_(max_queued_rows) {
  create_output(path, force);
  // NOMUTEX: one thread at a time uses the connection (this one, then the writer thread, then
  // close() after joining it), and SQLite's own lock around every bind and step was ~11% of the
  // writer's CPU.
  if (sqlite3_open_v2(path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) !=
      SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    fail("cannot create recording {}: {}", path, msg);
  }
  // WAL: readers (report, export) can open the file while it is being written, and a crash
  // leaves every committed batch intact. NORMAL sync is durable across process crashes.
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL"}) {
    std::string err = exec_sql(db_, pragma);
    if (!err.empty()) {
      sqlite3_close(db_);
      fail("cannot set up recording {}: {}", path, err);
    }
  }
  if (std::string err = exec_sql(db_, kRecordingSchema); !err.empty()) {
    sqlite3_close(db_);
    fail("cannot create the schema in {}: {}", path, err);
  }
  statements_ = std::make_unique<Statements>(db_);
  writer_ = std::thread([this] { writer_loop(); });
}

RecordingWriter::~RecordingWriter() { close(); }

void RecordingWriter::discard() {
  close();
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) remove_regular_file(path_ + suffix);
}

void RecordingWriter::set_meta(std::string key, std::string value) {
  batch_->meta.emplace_back(std::move(key), std::move(value));
}

void RecordingWriter::flush() {
  if (batch_->size() == 0) return;
  // the next batch sized like this one (to a bound): growing the call vectors row by row, copy
  // after copy, was ~2% of the recorder at a steady rate
  auto next = std::make_unique<Batch>();
  auto reserve = [](auto& to, const auto& from) {
    to.reserve(std::min<size_t>(from.size(), kReserveRows));
  };
  reserve(next->cuda_calls, batch_->cuda_calls);
  reserve(next->comm_calls, batch_->comm_calls);
  reserve(next->torch_calls, batch_->torch_calls);
  reserve(next->python_calls, batch_->python_calls);
  {
    std::unique_lock lock(mu_);
    // Back-pressure: while the writer is max_queued_rows_ behind (the disk slower than the
    // events, for longer than a second or so), the caller waits instead of queueing more. Its
    // ring buffer fills meanwhile and the kernel drops events, counted as dropped_events:
    // bounded memory and a count, not a recorder that grows until the OOM killer ends it.
    drained_.wait(lock, [this] { return queued_rows_ < max_queued_rows_ || writer_done_; });
    queued_rows_ += batch_->size();
    queue_.push_back(std::move(batch_));
  }
  cv_.notify_one();
  batch_ = std::move(next);
}

std::string RecordingWriter::close() {
  if (closed_) return error();
  closed_ = true;
  flush();
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (writer_.joinable()) writer_.join();
  statements_.reset();  // finalized before the connection closes
  // Fold the WAL back into the main file so the recording is one self-contained file.
  exec_sql(db_, "PRAGMA wal_checkpoint(TRUNCATE)");
  exec_sql(db_, "PRAGMA journal_mode=DELETE");
  sqlite3_close(db_);
  db_ = nullptr;
  return error();
}

size_t RecordingWriter::queued_rows() const {
  std::lock_guard lock(mu_);
  return queued_rows_;
}

std::string RecordingWriter::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

uint64_t RecordingWriter::rows_written() const {
  std::lock_guard lock(mu_);
  return rows_written_;
}

void RecordingWriter::writer_loop() {
  pthread_setname_np(pthread_self(), "eacgm-writer");
  for (;;) {
    std::unique_ptr<Batch> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {
        writer_done_ = true;
        drained_.notify_all();
        return;
      }
      batch = std::move(queue_.front());
      queue_.pop_front();
    }
    if (error().empty()) {  // after a write error (disk full) nothing more is kept
      try {
        write_batch(*batch);
      } catch (const Error& e) {  // a statement that would not prepare: keep the message
        exec_sql(db_, "ROLLBACK");
        std::lock_guard lock(mu_);
        if (error_.empty()) error_ = e.what();
      }
    }
    bool caught_up = false;
    {
      std::lock_guard lock(mu_);
      queued_rows_ -= batch->size();
      backlog_peak_ = std::max(backlog_peak_, queued_rows_ + batch->size());
      if (queued_rows_ == 0 && backlog_peak_ >= kTrimAfterRows) caught_up = true, backlog_peak_ = 0;
    }
    drained_.notify_all();
    batch.reset();
    // Caught up after a backlog (a burst): hand the freed batches' memory back to the system,
    // which glibc otherwise keeps (a soak's recorder stayed at 285 MB after a burst, 87 before).
    if (caught_up) malloc_trim(0);
  }
}

namespace {

bool write_meta(Statements& st, const std::vector<std::pair<std::string, std::string>>& values) {
  Statement& meta = st("INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)");
  for (const auto& [k, v] : values) {
    meta.bind(1, k);
    meta.bind(2, v);
    if (meta.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_processes(Statements& st, const std::vector<ProcessRow>& processes) {
  Statement& proc =
      st("INSERT INTO processes(pid, ppid, name, command, start_ns, job_id, rank, local_rank, "
         "world_size) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)");
  for (const auto& p : processes) {
    proc.bind(1, p.pid);
    proc.bind(2, p.ppid);
    proc.bind(3, p.name);
    proc.bind(4, p.command);
    proc.bind(5, static_cast<int64_t>(p.start_ns));
    if (p.job_id.empty())
      proc.bind_null(6);
    else
      proc.bind(6, p.job_id);
    int index = 7;
    for (int64_t v : {p.rank, p.local_rank, p.world_size}) {
      if (v < 0)
        proc.bind_null(index++);
      else
        proc.bind(index++, v);
    }
    if (proc.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_threads(Statements& st, const std::vector<ThreadRow>& threads) {
  Statement& thread = st("INSERT INTO threads(pid, tid, name) VALUES(?,?,?)");
  for (const auto& t : threads) {
    thread.bind(1, t.pid);
    thread.bind(2, t.tid);
    thread.bind(3, t.name);
    if (thread.run() != SQLITE_DONE) return false;
  }
  return true;
}

// Binds a CUDA call row's 20 columns from parameter `first` (those it has no value for are
// left NULL by Statement::run).
void bind_cuda_call(Statement& s, int first, const CudaCallRow& c) {
  auto at = [&](int col) { return first + col - 1; };
  s.bind(at(1), static_cast<int64_t>(c.ts_ns));
  s.bind(at(2), static_cast<int64_t>(c.dur_ns));
  s.bind(at(3), c.pid);
  s.bind(at(4), c.tid);
  s.bind(at(5), c.name);
  s.bind(at(6), c.ret);
  if (c.bytes >= 0) s.bind(at(7), c.bytes);
  if (!c.memcpy_kind.empty()) s.bind(at(8), c.memcpy_kind);
  if (c.has_stream) s.bind(at(9), static_cast<int64_t>(c.stream));
  if (c.is_launch) {
    for (int i = 0; i < 3; ++i) {
      s.bind(at(10 + i), c.grid[i]);
      s.bind(at(13 + i), c.block[i]);
    }
    s.bind(at(16), static_cast<int64_t>(c.shared_mem));
  }
  if (!c.kernel.empty()) s.bind(at(17), c.kernel);  // launches, and driver kernel lookups
  if (c.address) s.bind(at(18), static_cast<int64_t>(c.address));
  if (c.py_stack) s.bind(at(19), c.py_stack);
  if (c.runq_ns >= 0) s.bind(at(20), c.runq_ns);
}

// Rows go in kCudaRowsPerInsert at a time: one statement's run (its cursor, transaction
// check, reset) per eight rows instead of per row, ~15% of the writer at 300-600k calls/s.
constexpr int kCudaColumns = 20, kCudaRowsPerInsert = 8;

std::string multi_row_insert(const char* table, int columns, int rows) {
  std::string sql = fmt::format("INSERT INTO {} VALUES", table);
  for (int r = 0; r < rows; ++r) {
    sql += r ? ",(" : "(";
    for (int c = 1; c <= columns; ++c)
      sql += fmt::format("{}?{}", c > 1 ? "," : "", r * columns + c);
    sql += ")";
  }
  return sql;
}

bool write_cuda_calls(Statements& st, const std::vector<CudaCallRow>& calls) {
  if (calls.empty()) return true;
  size_t i = 0;
  if (calls.size() >= size_t(kCudaRowsPerInsert)) {
    static const std::string sql =
        multi_row_insert("cuda_calls", kCudaColumns, kCudaRowsPerInsert);
    Statement& many = st(sql);
    for (; i + kCudaRowsPerInsert <= calls.size(); i += kCudaRowsPerInsert) {
      for (int r = 0; r < kCudaRowsPerInsert; ++r)
        bind_cuda_call(many, r * kCudaColumns + 1, calls[i + r]);
      if (many.run() != SQLITE_DONE) return false;
    }
  }
  Statement& one = st("INSERT INTO cuda_calls VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,"
                      "?13,?14,?15,?16,?17,?18,?19,?20)");
  for (; i < calls.size(); ++i) {
    bind_cuda_call(one, 1, calls[i]);
    if (one.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_native_frames(Statements& st, const std::vector<NativeFrameRow>& frames) {
  if (frames.empty()) return true;
  Statement& frame = st("INSERT INTO native_stacks VALUES(?1,?2,?3,?4)");
  for (const auto& f : frames) {
    frame.bind(1, f.id);
    frame.bind(2, int64_t(f.depth));
    frame.bind(3, f.name);
    if (!f.module.empty()) frame.bind(4, f.module);
    if (frame.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_stack_samples(Statements& st, const std::vector<StackSampleRow>& samples) {
  if (samples.empty()) return true;
  Statement& sample = st("INSERT INTO stack_samples VALUES(?1,?2,?3,?4,?5)");
  for (const auto& x : samples) {
    sample.bind(1, int64_t(x.ts_ns));
    sample.bind(2, int64_t(x.pid));
    sample.bind(3, int64_t(x.tid));
    if (x.native_stack) sample.bind(4, x.native_stack);
    if (x.py_stack) sample.bind(5, x.py_stack);
    if (sample.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_offcpu_samples(Statements& st, const std::vector<OffCpuSampleRow>& samples) {
  if (samples.empty()) return true;
  Statement& sample = st("INSERT INTO offcpu_samples VALUES(?1,?2,?3,?4,?5,?6,?7)");
  for (const auto& x : samples) {
    sample.bind(1, int64_t(x.ts_ns));
    sample.bind(2, int64_t(x.dur_ns));
    sample.bind(3, int64_t(x.weight_ns));
    sample.bind(4, int64_t(x.pid));
    sample.bind(5, int64_t(x.tid));
    if (x.native_stack) sample.bind(6, x.native_stack);
    if (x.py_stack) sample.bind(7, x.py_stack);
    if (sample.run() != SQLITE_DONE) return false;
  }
  return true;
}

bool write_exits(Statements& st, const std::vector<ProcessExitRow>& exits) {
  Statement& exit_row = st("UPDATE processes SET end_ns = ?2, exit_code = ?3 WHERE rowid = "
                           "(SELECT max(rowid) FROM processes WHERE pid = ?1)");
  for (const auto& e : exits) {
    exit_row.bind(1, e.pid);
    exit_row.bind(2, static_cast<int64_t>(e.end_ns));
    exit_row.bind(3, e.exit_code);
    if (exit_row.run() != SQLITE_DONE) return false;
  }
  return true;
}

}  // namespace

void RecordingWriter::write_batch(const Batch& b) {
  auto failed = [this](const char* what) {
    std::string msg = fmt::format("writing {} to {} failed: {}", what, path_, sqlite3_errmsg(db_));
    if (sqlite3_errcode(db_) == SQLITE_FULL) msg += " (disk full: free space and record again)";
    exec_sql(db_, "ROLLBACK");
    std::lock_guard lock(mu_);
    if (error_.empty()) error_ = msg;
  };
  if (!exec_sql(db_, "BEGIN").empty()) return failed("a batch");

  Statements& st = *statements_;
  if (!write_meta(st, b.meta)) return failed("metadata");
  if (!write_processes(st, b.processes)) return failed("processes");
  if (!write_threads(st, b.threads)) return failed("threads");
  if (!write_cuda_calls(st, b.cuda_calls)) return failed("CUDA calls");
  if (!write_comm_calls(st, b.comm_calls)) return failed("communication calls");
  if (!write_torch_calls(st, b.torch_calls)) return failed("torch calls");
  if (!write_python_rows(st, b.python_calls, b.python_frames)) return failed("Python calls");
  if (!write_native_frames(st, b.native_frames)) return failed("native stacks");
  if (!write_stack_samples(st, b.stack_samples)) return failed("CPU samples");
  if (!write_offcpu_samples(st, b.offcpu_samples)) return failed("off-CPU samples");
  if (!write_host_samples(st, b.host_samples)) return failed("host samples");
  if (!write_gpu_rows(st, b.gpu_devices, b.gpu_samples, b.gpu_process_samples, b.gpu_xids))
    return failed("GPU samples");
  if (!write_gpu_activity(st, b.gpu_activity)) return failed("GPU activity");
  if (!write_gpu_collectives(st, b.gpu_collectives)) return failed("GPU collectives");
  if (!write_gpu_slices(st, b.gpu_slices)) return failed("GPU time slices");
  if (!write_exits(st, b.exits)) return failed("process exits");
  if (!exec_sql(db_, "COMMIT").empty()) return failed("a batch");
  std::lock_guard lock(mu_);
  rows_written_ += b.size();
}

}  // namespace eacgm
