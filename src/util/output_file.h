// Checks on a file eacgm is about to write (a recording, a trace, a merged recording): eacgm
// writes only regular files, and replaces only those (with --force); a device, a FIFO, a
// socket, a symlink or a directory at the path is never unlinked or written over.
#pragma once
#include <signal.h>

#include <functional>
#include <iosfwd>
#include <string>

namespace eacgm {

// Throws UsageError when `path` exists and is not a regular file, or exists without `force`,
// or its directory is missing or not writable (eacgm::Error). `option` names where the path
// came from in messages ("-o", "--perfetto").
void check_output_file(const std::string& path, bool force, const std::string& option);

// Removes `path` if it is a regular file (what check_output_file allowed replacing); anything
// else is left alone. Returns false if it could not.
bool remove_regular_file(const std::string& path);

// Unlinks `path` if SIGINT, SIGTERM or SIGHUP ends eacgm from now on (the handler then lets the
// signal end the process as it would have). Up to 32 paths; those beyond are not removed.
void remove_on_stop_signal(const std::string& path);

// The same for as long as it lives: then `path` is forgotten and the signal handlers eacgm had
// before are back (a recorder's or an agent's own).
class RemovedOnStopSignal {
 public:
  explicit RemovedOnStopSignal(const std::string& path);
  ~RemovedOnStopSignal();
  RemovedOnStopSignal(const RemovedOnStopSignal&) = delete;
  RemovedOnStopSignal& operator=(const RemovedOnStopSignal&) = delete;

 private:
  int slot_;
  struct sigaction before_[3] = {};  // SIGINT, SIGTERM, SIGHUP
};

// Writes `out` through `write` into OUT.tmp beside it, then renames it into place: an
// interrupted or failed write (eacgm::Error, a full disk, a stop signal) leaves no half file,
// and the tmp file is removed. Call check_output_file first.
void write_then_rename(const std::string& out, const std::function<void(std::ostream&)>& write);

}  // namespace eacgm
