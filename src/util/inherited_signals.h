// The signal dispositions and mask eacgm was started with, given back to a command it launches:
// eacgm ignores SIGPIPE and catches SIGINT, SIGTERM and SIGHUP for itself, and the traced program
// must see what it would have seen without eacgm (a shell pipeline's `yes | head -1` relies on
// SIGPIPE; `nohup` and `cmd &` rely on ignored SIGHUP and SIGINT).
#pragma once

namespace eacgm {

// Call first in main, before anything changes a disposition.
void save_inherited_signals();

// In a forked child before exec: each signal ignored at start is ignored again, every other
// one is back to its default, and the mask is the one at start. Async-signal-safe.
void restore_inherited_signals();

}  // namespace eacgm
