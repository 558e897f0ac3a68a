// The one batcher of libeacgm_cupti.so, shared by its two roles: CUDA's injection library
// (cupti_injection.cpp) and NCCL's profiler plugin (nccl_profiler.cpp). Not in the test programs
// that link activity_batch.cpp alone (they make their own).
#pragma once
#include "gputime/activity_batch.h"

namespace eacgm::gputime {

// Static, never destroyed before CUPTI's or NCCL's last callback (at exit): constant-initialised.
extern ActivityBatcher library_batcher;

}  // namespace eacgm::gputime
