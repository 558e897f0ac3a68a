// Synthetic recordings of one distributed job, for the merge + detect scale benchmark
// (bench/merge_scale.sh): what `eacgm record` on each host of an N-rank job would write for its
// ranks' collectives, written through eacgm's own RecordingWriter so the schema is always
// current.
//
//   synth_job DIR RANKS COLLECTIVES [RANKS_PER_HOST=8] [STRAGGLER=RANKS-1]
//
// Writes DIR/host<i>.eacgm.db (RANKS / RANKS_PER_HOST hosts) and DIR/truth.json. Each rank is
// one process (pids 1000 + local rank on every host, as containers give), calling
// gloo:all_reduce (64 KiB) once per 10 ms step on one communicator of all ranks: it begins after
// up to 300 us of compute jitter, and every rank completes 40-60 us after the last one began.
// From the second half on, the STRAGGLER rank begins 5 ms late in 5% of steps (the truth). Each
// host has its own monotonic clock (up to +-1 s apart) and a wall clock up to +-5 ms wrong, as
// NTP leaves it; merge must undo both.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "store/recording.h"
#include "store/rows.h"

namespace {

int64_t number(const char* text, const char* what, int64_t low) {
  char* end = nullptr;
  long long v = strtoll(text, &end, 10);
  if (!*text || *end || v < low) {
    fprintf(stderr, "synth_job: %s must be a whole number >= %lld, not '%s'\n", what,
            (long long)low, text);
    exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr,
            "usage: synth_job DIR RANKS COLLECTIVES [RANKS_PER_HOST=8] [STRAGGLER=RANKS-1]\n");
    return 2;
  }
  std::filesystem::path dir = argv[1];
  int64_t ranks = number(argv[2], "RANKS", 2);
  int64_t steps = number(argv[3], "COLLECTIVES", 1);
  int64_t per_host = argc > 4 ? number(argv[4], "RANKS_PER_HOST", 1) : 8;
  int64_t straggler = argc > 5 ? number(argv[5], "STRAGGLER", 0) : ranks - 1;
  if (straggler >= ranks || ranks % per_host) {
    fprintf(stderr, "synth_job: STRAGGLER must be a rank, RANKS a multiple of RANKS_PER_HOST\n");
    return 2;
  }
  std::filesystem::create_directories(dir);
  const int64_t hosts = ranks / per_host;
  const int64_t step_ns = 10'000'000, t0 = 1'000'000'000;
  const int64_t true_to_real = 1'795'000'000'000'000'000;
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> jitter(0, 300'000), finish(40'000, 60'000),
      clock(-1'000'000'000, 1'000'000'000), ntp(-5'000'000, 5'000'000);
  std::bernoulli_distribution late(0.05);

  // the job on the true clock: each rank's begin and end of every step's all_reduce
  std::vector<int64_t> begins(size_t(ranks * steps)), ends(size_t(ranks * steps));
  std::vector<std::pair<int64_t, int64_t>> delays;
  for (int64_t k = 0; k < steps; ++k) {
    int64_t last = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      int64_t b = t0 + k * step_ns + jitter(rng);
      if (r == straggler && k >= steps / 2 && late(rng)) {
        delays.emplace_back(b, b + 5'000'000);
        b += 5'000'000;
      }
      begins[size_t(r * steps + k)] = b;
      last = std::max(last, b);
    }
    for (int64_t r = 0; r < ranks; ++r) ends[size_t(r * steps + k)] = last + finish(rng);
  }

  const std::string command = "python3 train.py --model gpt";
  std::vector<int64_t> shifts;
  for (int64_t h = 0; h < hosts; ++h) {
    // this host's clocks: monotonic = true + shift; its wall clock is off by `err`
    int64_t shift = h ? clock(rng) : 0, err = h ? ntp(rng) : 0;
    shifts.push_back(shift);
    std::string path = (dir / fmt::format("host{}.eacgm.db", h)).string();
    eacgm::RecordingWriter w(path, true);
    w.set_meta("eacgm_version", "synth_job");
    w.set_meta("hostname", fmt::format("node-{:04}", h));
    w.set_meta("command", command);
    w.set_meta("monotonic_to_realtime_ns", std::to_string(true_to_real - shift + err));
    w.set_meta("start_monotonic_ns", std::to_string(t0 - step_ns + shift));
    w.set_meta("start_realtime_ns", std::to_string(true_to_real + t0 - step_ns + err));
    w.set_meta("end_monotonic_ns", std::to_string(t0 + (steps + 1) * step_ns + shift));
    w.set_meta("layers", "comm");
    w.set_meta("layers_requested", "comm");
    w.set_meta("events", std::to_string(per_host * steps));
    w.set_meta("dropped_events", "0");
    w.set_meta("exit_status", "0");
    for (int64_t l = 0; l < per_host; ++l) {
      int64_t r = h * per_host + l;
      eacgm::ProcessRow p;
      p.pid = uint32_t(1000 + l);
      p.ppid = 999;
      p.name = "python3";
      p.command = command;
      p.start_ns = uint64_t(t0 - step_ns + shift);
      p.job_id = "synth";
      p.rank = r, p.local_rank = l, p.world_size = ranks;
      w.add(p);
      for (int64_t k = 0; k < steps; ++k) {
        eacgm::CommCallRow c;
        int64_t b = begins[size_t(r * steps + k)], e = ends[size_t(r * steps + k)];
        c.ts_ns = uint64_t(b + shift);
        c.dur_ns = uint64_t(e - b);
        c.pid = c.tid = p.pid;
        c.name = "gloo:all_reduce";
        c.count = 16384;
        c.datatype = "float32";
        c.bytes = 65536;
        c.comm = 0x7f0000001000 + uint64_t(l) * 64;  // a handle: differs per process
        c.rank = r, c.nranks = ranks;
        w.add(c);
        if (w.pending() >= 100'000) w.flush();
      }
      w.add(eacgm::ProcessExitRow{p.pid, uint64_t(t0 + (steps + 1) * step_ns + shift), 0});
    }
    std::string error = w.close();
    if (!error.empty()) {
      fprintf(stderr, "synth_job: %s: %s\n", path.c_str(), error.c_str());
      return 1;
    }
  }
  // the delays on host (straggler / per_host)'s monotonic clock are what detect should find;
  // written on the true clock (the first host's, which merge keeps)
  std::ofstream truth(dir / "truth.json");
  truth << "{\"fault\": \"straggler\", \"layer\": \"comm\", \"rank\": " << straggler
        << ", \"intervals\": [";
  for (size_t i = 0; i < delays.size(); ++i)
    truth << (i ? ", " : "") << "[" << delays[i].first << ", " << delays[i].second << "]";
  // what merge should add to each host's times: -shift (the first host's clock is the truth)
  truth << "], \"offsets_ns\": {";
  for (int64_t h = 0; h < hosts; ++h)
    truth << (h ? ", " : "") << fmt::format("\"node-{:04}\": {}", h, -shifts[size_t(h)]);
  truth << "}}\n";
  printf("synth_job: %lld hosts x %lld ranks, %lld collectives each, rank %lld late %zu times: %s\n",
         (long long)hosts, (long long)per_host, (long long)steps, (long long)straggler,
         delays.size(), dir.c_str());
  return 0;
}
