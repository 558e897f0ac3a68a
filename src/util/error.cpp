// errno to text without the non-reentrant strerror.
#include "util/error.h"

#include <cstring>

namespace eacgm {

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer, which may or may not be buf.
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return msg;
}

}  // namespace eacgm
