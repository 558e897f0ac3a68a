// One agent per state dir, and one per node unless told otherwise: an exclusive flock(2) on a
// file, held while the agent runs (the kernel lets it go when the process ends, a crash or
// kill -9 included, so a stale file never blocks a restart). The file says which pid holds it.
#pragma once
#include <string>

namespace eacgm {

class InstanceLock {
 public:
  // Takes the lock on `path` (created 0644 with its folder when missing). Returns the empty
  // string when taken; otherwise why not, naming the holder's pid when another process holds it
  // ("held by pid 4242") or the error.
  std::string take(const std::string& path);
  ~InstanceLock();
  InstanceLock() = default;
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;
  bool held() const { return fd_ >= 0; }
  // Another process holds it (as opposed to an error opening the file).
  bool busy() const { return busy_; }

 private:
  int fd_ = -1;
  bool busy_ = false;
};

}  // namespace eacgm
