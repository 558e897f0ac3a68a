// Two "nodes" for the tests of a job across hosts: network namespaces with an address each
// (10.232.0.1 and .2), as two hosts on one switch would be. Either joined by a veth pair, or
// (reachable_from_host) each joined to a bridge in the test's own namespace, which then reaches
// both at 10.232.0.254 (a Prometheus there scrapes each node's agent).
#pragma once
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <string>

namespace e2e {

class NodePair {
 public:
  explicit NodePair(bool reachable_from_host = false) {
    remove_stale();
    std::string id = std::to_string(getpid() % 100000);
    bridge_ = reachable_from_host ? "eacgm-br" + id : "";
    std::string cmd;
    for (int n = 0; n < 2; ++n) {
      ns_[n] = "eacgm-node" + std::to_string(n) + "-" + id;
      dev_[n] = "eacgm-n" + std::to_string(n) + "v" + id;
      cmd += (n ? " && " : "") + std::string("ip netns add ") + ns_[n];
    }
    if (bridge_.empty()) {
      cmd += " && ip link add " + dev_[0] + " netns " + ns_[0] + " type veth peer name " +
             dev_[1] + " netns " + ns_[1];
    } else {
      cmd += " && ip link add " + bridge_ + " type bridge && ip addr add 10.232.0.254/24 dev " +
             bridge_ + " && ip link set " + bridge_ + " up";
      for (int n = 0; n < 2; ++n) {
        std::string host_end = "eacgm-h" + std::to_string(n) + "v" + id;
        cmd += " && ip link add " + dev_[n] + " netns " + ns_[n] + " type veth peer name " +
               host_end + " && ip link set " + host_end + " master " + bridge_ + " up";
      }
    }
    for (int n = 0; n < 2; ++n)
      cmd += " && ip -n " + ns_[n] + " addr add " + address(n) + "/24 dev " + dev_[n] +
             " && ip -n " + ns_[n] + " link set " + dev_[n] + " up && ip -n " + ns_[n] +
             " link set lo up";
    ok_ = system((cmd + " 2>/dev/null").c_str()) == 0;
  }
  ~NodePair() {
    // (a namespace's veth end goes with it, and its peer with it)
    std::string cmd = "ip netns del " + ns_[0] + " 2>/dev/null; ip netns del " + ns_[1] +
                      " 2>/dev/null";
    if (!bridge_.empty()) cmd += "; ip link del " + bridge_ + " 2>/dev/null";
    (void)system(cmd.c_str());
  }
  NodePair(const NodePair&) = delete;
  NodePair& operator=(const NodePair&) = delete;
  bool ok() const { return ok_; }
  std::string netns() const { return ns_[0] + "," + ns_[1]; }
  const std::string& ns(int n) const { return ns_[n]; }
  std::string devs() const { return dev_[0] + "," + dev_[1]; }
  const std::string& dev(int n) const { return dev_[n]; }
  static std::string address(int n) { return "10.232.0." + std::to_string(n + 1); }

 private:
  // A test run killed outright (SIGKILL, a CI job cancelled) leaves its namespaces and bridge
  // behind, and a leftover bridge holding 10.232.0.254 breaks every later run's bridge: remove
  // those whose test process is gone (no live eacgm_e2e_tests process has that id).
  static void remove_stale() {
    std::set<std::string> live;
    if (DIR* d = opendir("/proc")) {
      while (dirent* e = readdir(d)) {
        char* end = nullptr;
        long pid = strtol(e->d_name, &end, 10);
        if (pid <= 0 || *end) continue;
        std::ifstream comm(std::string("/proc/") + e->d_name + "/comm");
        std::string name;
        if (std::getline(comm, name) && name.rfind("eacgm_e2e", 0) == 0)
          live.insert(std::to_string(pid % 100000));
      }
      closedir(d);
    }
    std::string cmd;
    auto each = [&](const char* list, const std::regex& re, const std::string& del) {
      FILE* f = popen(list, "r");
      if (!f) return;
      char line[512];
      std::smatch m;
      while (fgets(line, sizeof line, f)) {
        std::string l(line);
        if (std::regex_search(l, m, re) && !live.count(m[2].str()))
          cmd += del + m[1].str() + " 2>/dev/null; ";
      }
      pclose(f);
    };
    each("ip netns list 2>/dev/null", std::regex(R"(^(eacgm-node[01]-(\d+))\b)"),
         "ip netns del ");
    each("ip -o link show type bridge 2>/dev/null", std::regex(R"(^\d+: (eacgm-br(\d+))[:@])"),
         "ip link del ");
    if (!cmd.empty()) (void)system(cmd.c_str());
  }

  std::string ns_[2], dev_[2], bridge_;
  bool ok_ = false;
};

}  // namespace e2e
