// StopFlag: the periodic threads' sleep, ended by its deadline or at once by a stop request.
#include <gtest/gtest.h>

#include <thread>

#include "util/stop_flag.h"

namespace eacgm {
namespace {

using namespace std::chrono_literals;

TEST(StopFlag, SleepsUntilTheDeadlineWhenNotStopped) {
  StopFlag flag;
  auto deadline = StopFlag::Clock::now() + 30ms;
  EXPECT_FALSE(flag.sleep_until(deadline));
  EXPECT_GE(StopFlag::Clock::now(), deadline);
  EXPECT_FALSE(flag.sleep_until(StopFlag::Clock::now() - 1s));  // a deadline already past
}

TEST(StopFlag, ARequestEndsTheSleepAtOnceAndStaysUntilReset) {
  StopFlag flag;
  auto start = StopFlag::Clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(20ms);
    flag.request();
  });
  EXPECT_TRUE(flag.sleep_until(start + 60s));
  stopper.join();
  EXPECT_LT(StopFlag::Clock::now() - start, 30s);  // woken, not timed out
  EXPECT_TRUE(flag.requested());
  EXPECT_TRUE(flag.sleep_for(60s));  // already requested: no sleep at all
  flag.reset();
  EXPECT_FALSE(flag.requested());
  EXPECT_FALSE(flag.sleep_for(1ms));
}

}  // namespace
}  // namespace eacgm
