// `eacgm doctor`: what works on this machine for tracing, and what is missing and why.
#pragma once
#include <cstdio>

namespace eacgm {

// Prints one line per check; returns 0 when recording can work, 1 otherwise.
int run_doctor(FILE* out);

}  // namespace eacgm
