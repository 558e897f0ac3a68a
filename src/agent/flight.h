// The flight recorder: the last --flight-seconds of full-detail rows held in memory (within
// --flight-mb), written out on demand as an ordinary recording (`report`, `detect`, `export`
// read it unchanged) into the state dir, oldest recordings removed beyond --flight-keep-mb.
//
// A dump asked for `after_ns` later (an anomaly: the time after it matters too) is written
// then; the file name is chosen when it is asked for, so the anomaly's log line can name it.
// Files are written on a thread of their own from a copy of the rows: the pipeline goes on.
#pragma once
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "store/sink.h"

namespace eacgm {

struct FlightOptions {
  std::string dir;  // where recordings go (the state dir); "": the recorder is off
  uint64_t seconds_ns = 60'000'000'000ull;
  uint64_t max_bytes = 256ull << 20;    // rows held in memory
  uint64_t keep_bytes = 2048ull << 20;  // flight recordings kept on disk, newest first
};

class FlightRecorder final : public Sink {
 public:
  explicit FlightRecorder(FlightOptions options);
  ~FlightRecorder() override;  // waits for a dump being written

  void add(const CudaCallRow& r) override { keep(r); }
  void add(const CommCallRow& r) override { keep(r); }
  void add(const TorchCallRow& r) override { keep(r); }
  void add(const PythonCallRow& r) override { keep(r); }
  void add(const HostSampleRow& r) override { keep(r); }
  void add(const GpuSample& r) override { keep(r); }
  void add(const GpuProcessSample& r) override { keep(r); }
  void add(const GpuXidEvent& r) override { keep(r); }
  void add(const GpuActivityRow& r) override { keep(r); }
  void add(const GpuCollectiveRow& r) override { keep(r); }
  void add(const GpuSliceRow& r) override { keep(r); }
  void add(const PythonStackFrameRow& r) override;
  void add(const ProcessRow& r) override { processes_[r.pid] = r; }
  void add(const ProcessExitRow& r) override;
  void add(const ThreadRow& r) override { threads_[r.tid] = r; }
  void add(const GpuDevice& r) override { devices_[r.index] = r; }
  void set_meta(std::string key, std::string value) override;
  // Writes the dumps that are due.
  void flush() override;
  // The pipeline's count of events lost so far (a recording says how many of its own were).
  void note_dropped(uint64_t total);

  // Asks for a recording of the held past up to `after_ns` from now; returns its path ("" when
  // the recorder is off). `reason` goes into the name and the meta ("anomaly", "signal", "http").
  std::string request(const std::string& reason, uint64_t after_ns);
  // Writes what is due now and waits for it (at the agent's stop).
  void finish();

  size_t held_rows() const { return held_rows_; }
  uint64_t held_bytes() const { return bytes_; }
  // The last error writing a recording, or "".
  std::string last_error() const;
  // When the last recording was written, on CLOCK_MONOTONIC: (start, end), end 0 while it is
  // being written; (0, 0) before the first.
  std::pair<uint64_t, uint64_t> busy() const;

 private:
  // Rows are held by type, each type's in chunks that a snapshot shares rather than copies:
  // copying a minute of a Python job's rows (1.4 million, each with its strings) took the
  // pipeline's thread 1.9 s at the job's priority, a CPU the job lost and events not read. A
  // chunk that went into a snapshot grows no more (the writer thread reads it); rows leave the
  // oldest chunk from its front (`first`), and the chunk goes when none are left, to be filled
  // again when no snapshot holds it. (One chunk type for every row, a variant, made a torch
  // call's 56 bytes 280, and each new chunk's pages faulted in: half the pipeline thread's
  // time beside a training, session 59.)
  template <typename T>
  struct Chunk {
    std::vector<T> rows;
    size_t first = 0;  // rows before it are evicted (the pipeline's thread alone reads this)
  };
  template <typename T>
  struct Lane {
    using Row = T;
    std::deque<std::shared_ptr<Chunk<T>>> chunks;  // oldest first; only the last grows
    bool last_shared = false;  // the last chunk is in a snapshot: rows start a new one
    std::vector<std::shared_ptr<Chunk<T>>> spare;  // emptied, no snapshot holds them
  };
  // About half a MiB a chunk (a GPU sample's chunk as a torch call's)
  template <typename T>
  static constexpr size_t kChunkRows = std::max<size_t>(64, (512u << 10) / sizeof(T));
  static constexpr size_t kSpareChunks = 2;  // per type: what a steady stream reuses
  // A chunk's held rows, as a snapshot took them.
  template <typename T>
  struct Range {
    std::shared_ptr<const Chunk<T>> chunk;
    size_t begin, end;
  };
  template <typename T>
  using Ranges = std::vector<Range<T>>;
  // One of each row type's
  template <template <typename> class F>
  using PerRow = std::tuple<F<CudaCallRow>, F<CommCallRow>, F<TorchCallRow>, F<PythonCallRow>,
                            F<HostSampleRow>, F<GpuSample>, F<GpuProcessSample>, F<GpuXidEvent>,
                            F<GpuActivityRow>, F<GpuCollectiveRow>, F<GpuSliceRow>>;
  struct Pending {
    std::string path, reason;
    uint64_t due_ns;
  };
  template <typename T>
  void keep(const T& row);
  void evict(uint64_t now_ns);
  // Drops a lane's oldest row; false when it holds none.
  template <typename T>
  bool evict_front(Lane<T>& lane);
  // What one recording holds, copied for the writer thread.
  struct Snapshot {
    PerRow<Ranges> rows;
    std::vector<ProcessRow> processes;
    std::vector<ProcessExitRow> exits;
    std::vector<ThreadRow> threads;
    std::vector<GpuDevice> devices;
    std::vector<PythonStackFrameRow> frames;
    std::vector<std::pair<std::string, std::string>> meta;
  };
  void write(const Pending& p);
  std::shared_ptr<Snapshot> snapshot(const Pending& p);  // (seals the last chunk)
  static std::string write_snapshot(const std::string& path, const Snapshot& c);
  void retain();

  FlightOptions o_;
  PerRow<Lane> lanes_;
  size_t held_rows_ = 0;
  uint64_t bytes_ = 0;
  std::unordered_map<uint32_t, ProcessRow> processes_;
  std::unordered_map<uint32_t, ProcessExitRow> exits_;  // held as long as their rows may be
  std::unordered_map<uint32_t, ThreadRow> threads_;
  std::map<uint32_t, GpuDevice> devices_;
  std::map<int64_t, std::vector<PythonStackFrameRow>> stacks_;
  std::vector<std::pair<std::string, std::string>> meta_;
  std::deque<std::pair<uint64_t, uint64_t>> dropped_;  // (time, total so far), as the rows
  std::vector<Pending> pending_;
  std::string writing_;  // the path of the last recording handed to the writer
  std::thread writer_;
  mutable std::mutex mu_;
  std::string error_;
  uint64_t busy_start_ = 0, busy_end_ = 0;  // under mu_
  // (under mu_) the thread writing now (0: none), and whether the agent is stopping: writes
  // then run at normal priority
  pid_t writer_tid_ = 0;
  bool hurry_ = false;
};

}  // namespace eacgm
