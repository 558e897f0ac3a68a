#include "util/inherited_signals.h"

#include <signal.h>

namespace eacgm {
namespace {

bool g_saved = false;
bool g_ignored[NSIG] = {};
sigset_t g_mask;

}  // namespace

void save_inherited_signals() {
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    g_ignored[sig] = sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler == SIG_IGN;
  }
  sigprocmask(SIG_SETMASK, nullptr, &g_mask);
  g_saved = true;
}

void restore_inherited_signals() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa {};
    sa.sa_handler = g_saved && g_ignored[sig] ? SIG_IGN : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);  // fails harmlessly for numbers the kernel reserves
  }
  if (g_saved) {
    sigprocmask(SIG_SETMASK, &g_mask, nullptr);
  } else {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
  }
}

}  // namespace eacgm
