// Keeps the static eacgm binary runnable on glibc 2.34 (RHEL 9, Ubuntu 22.04), not only on the
// 2.36 it is built against. GCC 12's libstdc++.a, linked in, calls arc4random (new in glibc
// 2.36) for std::random_device; the eacgm target links with -Wl,--wrap=arc4random, which sends
// those calls here: 32 bits from getrandom(2) (glibc 2.25, Linux 3.17). Like arc4random, it
// never fails: without randomness from the kernel it aborts.
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

extern "C" uint32_t __wrap_arc4random(void) {
  uint32_t value = 0;
  for (;;) {
    ssize_t n = getrandom(&value, sizeof value, 0);
    if (n == static_cast<ssize_t>(sizeof value)) return value;
    if (n < 0 && errno != EINTR) std::abort();
  }
}
