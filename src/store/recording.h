// Writes a recording: one SQLite file, rows batched into transactions on a writer thread.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "store/sink.h"

struct sqlite3;

namespace eacgm {

class Statements;  // store/sqlite_util.h

// The schema every recording has (docs/recording.md has every column). Exposed for tests and
// readers.
extern const char* const kRecordingSchema;

// The recording sink: what `record` and the flight recorder write.
class RecordingWriter final : public Sink {
 public:
  // Creates `path`, mode 0600. An existing file is refused unless `force`, and anything but a
  // regular file always (never replaced); the directory must be writable.
  // Throws eacgm::Error naming the path and the fix.
  // At most `max_queued_rows` wait for the writer thread: flush() waits beyond (see flush).
  RecordingWriter(const std::string& path, bool force, size_t max_queued_rows = 1'000'000);
  ~RecordingWriter() override;  // close()s
  // Closes and removes the file: for a recording that never started (nothing to keep, and a
  // retry must not find it in the way).
  void discard();
  RecordingWriter(const RecordingWriter&) = delete;
  RecordingWriter& operator=(const RecordingWriter&) = delete;

  // Buffered on the caller's thread; flush() hands the batch to the writer thread.
  void set_meta(std::string key, std::string value) override;
  void add(const CudaCallRow& row) override { batch_->cuda_calls.push_back(row); }
  void add(const CommCallRow& row) override { batch_->comm_calls.push_back(row); }
  void add(const TorchCallRow& row) override { batch_->torch_calls.push_back(row); }
  void add(const ProcessRow& row) override { batch_->processes.push_back(row); }
  void add(const ProcessExitRow& row) override { batch_->exits.push_back(row); }
  void add(const ThreadRow& row) override { batch_->threads.push_back(row); }
  void add(const HostSampleRow& row) override { batch_->host_samples.push_back(row); }
  void add(const GpuDevice& row) override { batch_->gpu_devices.push_back(row); }
  void add(const GpuSample& row) override { batch_->gpu_samples.push_back(row); }
  void add(const GpuProcessSample& row) override { batch_->gpu_process_samples.push_back(row); }
  void add(const GpuXidEvent& row) override { batch_->gpu_xids.push_back(row); }
  void add(const GpuActivityRow& row) override { batch_->gpu_activity.push_back(row); }
  void add(const GpuCollectiveRow& row) override { batch_->gpu_collectives.push_back(row); }
  void add(const GpuSliceRow& row) override { batch_->gpu_slices.push_back(row); }
  void add(const PythonCallRow& row) override { batch_->python_calls.push_back(row); }
  void add(const PythonStackFrameRow& row) override { batch_->python_frames.push_back(row); }
  void add(const StackSampleRow& row) override { batch_->stack_samples.push_back(row); }
  void add(const OffCpuSampleRow& row) override { batch_->offcpu_samples.push_back(row); }
  void add(const NativeFrameRow& row) override { batch_->native_frames.push_back(row); }
  size_t pending() const { return batch_->size(); }
  void flush() override;

  // Writes what is left, stops the writer thread, and closes the file. Returns the first
  // write error ("" if none) so the caller can say what was kept.
  std::string close();

  // The first error the writer thread hit (e.g. disk full), or "".
  std::string error() const override;
  uint64_t rows_written() const;
  // Rows handed to the writer thread and not written yet.
  size_t queued_rows() const;

 private:
  struct Batch {
    std::vector<std::pair<std::string, std::string>> meta;
    std::vector<CudaCallRow> cuda_calls;
    std::vector<CommCallRow> comm_calls;
    std::vector<TorchCallRow> torch_calls;
    std::vector<ProcessRow> processes;
    std::vector<ProcessExitRow> exits;
    std::vector<ThreadRow> threads;
    std::vector<HostSampleRow> host_samples;
    std::vector<GpuDevice> gpu_devices;
    std::vector<GpuSample> gpu_samples;
    std::vector<GpuProcessSample> gpu_process_samples;
    std::vector<GpuXidEvent> gpu_xids;
    std::vector<GpuActivityRow> gpu_activity;
    std::vector<GpuCollectiveRow> gpu_collectives;
    std::vector<GpuSliceRow> gpu_slices;
    std::vector<PythonCallRow> python_calls;
    std::vector<PythonStackFrameRow> python_frames;
    std::vector<StackSampleRow> stack_samples;
    std::vector<OffCpuSampleRow> offcpu_samples;
    std::vector<NativeFrameRow> native_frames;
    size_t size() const {
      return meta.size() + cuda_calls.size() + comm_calls.size() + torch_calls.size() +
             processes.size() + exits.size() + threads.size() + host_samples.size() +
             gpu_devices.size() + gpu_samples.size() + gpu_process_samples.size() +
             gpu_xids.size() + gpu_activity.size() + gpu_collectives.size() + gpu_slices.size() + python_calls.size() + python_frames.size() + stack_samples.size() +
             offcpu_samples.size() + native_frames.size();
    }
  };
  void writer_loop();
  void write_batch(const Batch& batch);

  std::string path_;
  sqlite3* db_ = nullptr;
  std::unique_ptr<Statements> statements_;  // the writer thread's, kept across batches
  std::unique_ptr<Batch> batch_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Batch>> queue_;
  // Rows handed to the writer thread and not yet written; flush() waits while there are
  // max_queued_rows_ (by default about a second of the writer's work, 100-200 MB).
  size_t max_queued_rows_;
  size_t queued_rows_ = 0;
  size_t backlog_peak_ = 0;  // most rows queued since the queue was last empty
  static constexpr size_t kTrimAfterRows = 100'000;
  // the most rows of one kind a new batch is made ready for (~10 MB of CUDA call rows)
  static constexpr size_t kReserveRows = 65'536;
  std::condition_variable drained_;
  bool writer_done_ = false;
  bool stopping_ = false;
  std::string error_;
  uint64_t rows_written_ = 0;
  std::thread writer_;
  bool closed_ = false;
};

}  // namespace eacgm
