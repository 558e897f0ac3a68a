// /proc/PID/environ and /proc/PID/cgroup of a process eacgm does not control: any bytes give an
// identity whose values are printable and bounded (they become labels and table values).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "probe/job_identity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  // the first line is the cgroup file, the rest the environment (NUL-separated)
  size_t nl = all.find('\n');
  std::string_view cgroup = nl == std::string_view::npos ? std::string_view() : all.substr(0, nl);
  std::string_view environ = nl == std::string_view::npos ? all : all.substr(nl + 1);
  eacgm::JobIdentity id = eacgm::job_identity_from(environ, cgroup);
  for (const std::string* v :
       {&id.job, &id.rank, &id.local_rank, &id.world_size, &id.container, &id.pod}) {
    if (v->size() > 256) std::abort();
    for (char c : *v)
      if (static_cast<unsigned char>(c) < 0x20) std::abort();
  }
  return 0;
}
