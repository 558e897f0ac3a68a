// Releasing BPF links together. Closing a uprobe_multi or tracepoint link waits in the kernel
// for RCU grace periods (30-76 ms each on this VM: the eight links of a plain `record` took
// ~0.45 s of each stop, one after another). Released from a thread each, the waits overlap.
#pragma once

#include <functional>
#include <vector>

namespace eacgm {

// Runs each release (a blocking close of a link) on its own thread and returns once all are
// done; where a thread cannot be made, the rest run on this one, in order.
void release_together(std::vector<std::function<void()>> releases);

}  // namespace eacgm
