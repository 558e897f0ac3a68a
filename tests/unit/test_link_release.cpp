// release_together: every release runs, and all of them at once (each waits for the others,
// which only works if none waits for another to finish first).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "probe/link_release.h"

namespace eacgm {
namespace {

TEST(LinkRelease, EveryReleaseRunsAtOnce) {
  constexpr int kReleases = 6;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0, saw_all = 0;
  std::vector<std::function<void()>> releases;
  for (int i = 0; i < kReleases; ++i)
    releases.emplace_back([&] {
      std::unique_lock lock(mu);
      ++arrived;
      cv.notify_all();
      // run one after another, the first would wait here for the others: the bound only keeps
      // such a failure from hanging the test
      if (cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived == kReleases; }))
        ++saw_all;
    });
  release_together(std::move(releases));
  EXPECT_EQ(arrived, kReleases);
  EXPECT_EQ(saw_all, kReleases);
}

TEST(LinkRelease, NoneAndOneRunWithoutThreads) {
  release_together({});
  int ran = 0;
  release_together({[&] { ++ran; }});
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace eacgm
