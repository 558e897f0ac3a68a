#include "probe/link_release.h"

#include <system_error>
#include <thread>

namespace eacgm {

void release_together(std::vector<std::function<void()>> releases) {
  if (releases.size() <= 1) {
    for (auto& r : releases) r();
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(releases.size());
  size_t started = 0;
  try {
    for (; started < releases.size(); ++started) threads.emplace_back(std::move(releases[started]));
  } catch (const std::system_error&) {
    // no thread left to make (a limit on tasks): what was not handed to one runs here
  }
  for (size_t i = started; i < releases.size(); ++i) releases[i]();
  for (auto& t : threads) t.join();
}

}  // namespace eacgm
