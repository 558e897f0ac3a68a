// Reads a recording and feeds the timeline writers.
#include "export/exporter.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "export/chrome_json.h"
#include "export/perfetto.h"
#include "store/reader.h"
#include "store/sqlite_util.h"
#include "util/error.h"

namespace eacgm {
namespace {

void add_cuda_slices(const RecordingReader& rec, TimelineSink& sink, int64_t to_real) {
  rec.query(
      "SELECT ts_ns, dur_ns, pid, tid, name, ret, bytes, memcpy_kind, stream, grid_x, grid_y, "
      "grid_z, block_x, block_y, block_z, shared_mem, kernel FROM cuda_calls ORDER BY ts_ns",
      [&](Statement& s) {
        TimelineSlice slice;
        slice.ts_ns = uint64_t(s.int_at(0) + to_real);
        slice.dur_ns = uint64_t(s.int_at(1));
        slice.pid = uint32_t(s.int_at(2));
        slice.tid = uint32_t(s.int_at(3));
        slice.category = "cuda";
        slice.name = std::string(s.text_at(4));
        if (!s.null_at(16)) slice.args.push_back({"kernel", std::string(s.text_at(16))});
        if (!s.null_at(6)) slice.args.push_back({"bytes", s.int_at(6)});
        if (!s.null_at(7)) slice.args.push_back({"kind", std::string(s.text_at(7))});
        if (!s.null_at(8)) slice.args.push_back({"stream", uint64_t(s.int_at(8))});
        if (!s.null_at(9)) {
          slice.args.push_back({"grid", fmt::format("({}, {}, {})", s.int_at(9), s.int_at(10),
                                                    s.int_at(11))});
          slice.args.push_back({"block", fmt::format("({}, {}, {})", s.int_at(12),
                                                     s.int_at(13), s.int_at(14))});
          slice.args.push_back({"shared_mem", s.int_at(15)});
        }
        slice.args.push_back({"ret", s.int_at(5)});
        sink.add_slice(slice);
      });
}

}  // namespace

void emit_timeline(const RecordingReader& rec, TimelineSink& sink) {
  int64_t to_real = rec.monotonic_to_realtime_ns();
  std::set<uint32_t> pids;
  // the latest row of a pid names it (after exec)
  rec.query("SELECT pid, COALESCE(NULLIF(command, ''), name) FROM processes ORDER BY rowid",
            [&](Statement& s) {
              uint32_t pid = uint32_t(s.int_at(0));
              pids.insert(pid);
              sink.add_process({pid, std::string(s.text_at(1))});
            });
  // processes seen only through their calls (e.g. --all) still get a track
  rec.query("SELECT DISTINCT pid FROM threads", [&](Statement& s) {
    uint32_t pid = uint32_t(s.int_at(0));
    if (pids.insert(pid).second) sink.add_process({pid, fmt::format("pid {}", pid)});
  });
  rec.query("SELECT pid, tid, name FROM threads", [&](Statement& s) {
    sink.add_thread({uint32_t(s.int_at(0)), uint32_t(s.int_at(1)), std::string(s.text_at(2))});
  });
  add_cuda_slices(rec, sink, to_real);
}

void export_recording(const std::string& db, const std::string& out, ExportFormat format,
                      bool force) {
  RecordingReader rec(db);
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && !force)
    throw UsageError(fmt::format(
        "output {} already exists (use --force to overwrite, or choose another name)", out));
  // Write next to the target and rename at the end: an interrupted export leaves no half file.
  std::string tmp = out + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file) fail("cannot write {}: {} (check the directory exists and is writable)", out,
                    errno_text(errno));
    auto sink = format == ExportFormat::Perfetto ? make_perfetto_writer(file)
                                                 : make_chrome_json_writer(file);
    try {
      emit_timeline(rec, *sink);
      sink->finish();
      file.close();
      if (!file) fail("cannot write {}: disk full or I/O error (free space and export again)", out);
    } catch (...) {
      std::filesystem::remove(tmp, ec);
      throw;
    }
  }
  std::filesystem::rename(tmp, out, ec);
  if (ec) fail("cannot move {} to {}: {}", tmp, out, ec.message());
}

}  // namespace eacgm
